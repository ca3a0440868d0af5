"""The floor: facts about the installed torch and the machine (torch-version differences, the
native guard, the schema-type table and guard codes, after-import hooks), shared by every layer
above. Imports nothing of opclass but :mod:`opclass.errors`; :mod:`.names` imports no torch."""
