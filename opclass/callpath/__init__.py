"""How ``MyOp(x)`` runs: the generated call function, the Python guard, the class-call
attributes, and torch.compile's view of a class call."""
