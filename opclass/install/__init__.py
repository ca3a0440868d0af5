"""A spec -> a live op: one :class:`~opclass.install.record.OpRecord` per install, its library
fragment, the core kernels, the output contract, the autograd Functions, the call plan, the
live table. Knows no hook by name and no class: the hooks and the class call plug in."""
