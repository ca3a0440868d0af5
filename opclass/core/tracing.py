"""An op's own mistake, raised while torch.compile traces it, said in the first line.

torch.compile (dynamo) runs each op on FakeTensors and wraps what it raises in its own error
("RuntimeError when making fake tensor call"), burying the op's message. The op's own mistake
(no fake kernel, a fake kernel that reads data) is raised there as the graph break for an op
with no fake kernel, the op's message first: ``fullgraph=True`` fails with it, else the op runs
eagerly. Outside dynamo (eager, torch.export, FakeTensorMode) the error is raised as it is.

Example:
    >>> from opclass.core.tracing import raise_in_trace
    >>> try:
    ...     raise_in_trace(RuntimeError("docs::op has no fake kernel: define Op.abstract"))
    ... except RuntimeError as e:
    ...     print(e)
    docs::op has no fake kernel: define Op.abstract
"""

from __future__ import annotations

import sys
from typing import NoReturn


def raise_in_trace(error: Exception, cause: BaseException | None = None) -> NoReturn:
    """Raise ``error`` (from ``cause``); inside dynamo's run of an op on FakeTensors, as
    dynamo's own error whose first line is ``error``'s message."""
    # Only where dynamo is already imported: opclass never imports it.
    if getattr(sys.modules.get("torch._dynamo.utils"), "get_current_node", lambda: None)() is not None:
        from torch._dynamo.exc import unimplemented

        first, _, rest = str(error).partition("\n")
        unimplemented(gb_type=first, context="", explanation=rest.strip() or "The op raised this while torch.compile ran it on FakeTensors.", hints=[], from_exc=cause if cause is not None else error)
    raise error from cause
