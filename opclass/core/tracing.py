"""An op's own mistake, raised while torch.compile traces it, said in the first line.

torch.compile (dynamo) runs each op on FakeTensors and wraps whatever the op raises in an error
whose first line is its own ("RuntimeError when making fake tensor call"), the op's message
buried in the explanation. A mistake of the op's own (no fake kernel, a fake kernel that reads
data) is raised there as the graph break torch raises for an op with no fake kernel, with the
op's message as its first line: ``fullgraph=True`` fails with it, and without it the op runs
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
    utils = sys.modules.get("torch._dynamo.utils")
    if utils is not None and getattr(utils, "get_current_node", lambda: None)() is not None:
        from torch._dynamo.exc import unimplemented

        first, _, rest = str(error).partition("\n")
        unimplemented(gb_type=first, context="", explanation=rest.strip() or "The op raised this while torch.compile ran it on FakeTensors.", hints=[], from_exc=cause if cause is not None else error)
    raise error from cause
