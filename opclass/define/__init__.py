"""A class statement -> a frozen :class:`~opclass.define.spec.OpSpec`: the hook registry, the
annotations and the schema, and every check of a definition. Registers nothing."""
