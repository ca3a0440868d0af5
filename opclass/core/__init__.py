"""The floor: facts about the installed torch and the machine (torch-version differences, the
native guard, the schema-type table and guard codes, after-import hooks), shared by every layer
above. Imports no other opclass module; :mod:`.names` imports no torch."""
