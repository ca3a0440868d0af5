"""Class keywords are checked against ``CustomOp.__init_subclass__``."""

from __future__ import annotations

from torch import Tensor

from opclass import CustomOp


# M: error: Argument "name" to "__init_subclass__" of "CustomOp" has incompatible type "int"; expected "str | None"  [arg-type]
# P: error: Incorrect keyword arguments for __init_subclass__ method  [reportGeneralTypeIssues]
# P: error: Argument of type "Literal[3]" cannot be assigned to parameter "name" of type "str | None" in function "__init_subclass__"  [reportArgumentType]
class BadName(CustomOp, name=3):
    @staticmethod
    def default(x: Tensor) -> Tensor:
        return x.clone()


# M: error: Unexpected keyword argument "mutates" for "__init_subclass__" of "CustomOp"  [call-arg]
# P: error: Incorrect keyword arguments for __init_subclass__ method  [reportGeneralTypeIssues]
# P: error: Argument of type "tuple[Literal['x']]" cannot be assigned to parameter "mutates" of type "Never" in function "__init_subclass__"  [reportArgumentType]
class BadKeyword(CustomOp, name="typing_cases::bad_keyword", mutates=("x",)):
    @staticmethod
    def default(x: Tensor) -> None:
        x.zero_()


# M: error: Argument "existing" to "__init_subclass__" of "CustomOp" has incompatible type "str"; expected "bool | None"  [arg-type]
# P: error: Incorrect keyword arguments for __init_subclass__ method  [reportGeneralTypeIssues]
# P: error: Argument of type "Literal['yes']" cannot be assigned to parameter "existing" of type "bool | None" in function "__init_subclass__"  [reportArgumentType]
class BadExisting(CustomOp, name="typing_cases::scale", existing="yes"):
    pass
