"""opclass's own hooks, each registered through the public hook API as a third party's would be."""
