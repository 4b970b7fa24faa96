"""A timed call replayed as a CUDA graph: its kernel launches recorded once, replayed as one.

Why: a chunked mixer's forward loops over its chunks in Python, a few small kernels per chunk
(256 chunks of 32 at 8k positions), so on a GPU its eager time is mostly the host launching
kernels, not the GPU running them: on an H200, delta_net's chunked forward took 9–25 ms eagerly
where FLA's fused kernel took 1.3 ms (docs/speed.md, "On CUDA"). A GPU user deploys such a loop
captured in a graph (`torch.compile`'s "reduce-overhead" mode captures one too); what a replay
costs is the kernels' own time. Dense SDPA, the reference of the ratio, is replayed the same way
in the same job, so the ratio compares replay with replay.

`graphed(what, call, device)` warms ``call`` on a side stream (`WARM_CALLS` calls, as torch's
documentation does it: autotuners, lazy initialisation and the caching allocator settle outside
the capture), captures one call in a `torch.cuda.CUDAGraph` and returns a function that replays
it. A call that needs the host at each run (a size read back with ``.item()``, a
synchronisation, a CPU tensor) cannot be captured: torch refuses, and `graphed` raises
`UnsupportedError` naming the call and torch's reason, which the job records. On a device other
than CUDA there are no graphs: `UnsupportedError` as well.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from attnbench.variant import UnsupportedError

WARM_CALLS = 3  # calls before the capture (torch's documentation warms with three)


def graphed(what: str, call: Callable[[], object], device: torch.device) -> Callable[[], None]:
    """``call`` captured once in a CUDA graph on ``device``; the returned function replays it.

    The replay recomputes into the tensors the captured call allocated (the graph's private
    memory pool), so a caller that reads results reads them there; a timed call reads none."""
    if device.type != "cuda":
        raise UnsupportedError(
            f"task.cuda_graph=true replays {what} as a CUDA graph, which needs device=cuda "
            f"(this job runs on {device.type}): drop task.cuda_graph off a GPU."
        )
    side = torch.cuda.Stream(device)
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side):
        for _ in range(WARM_CALLS):
            call()
    torch.cuda.current_stream(device).wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(graph):
            call()
    except RuntimeError as err:  # torch's capture errors (AcceleratorError is one too)
        reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise UnsupportedError(f"{what} cannot be captured in a CUDA graph: {reason}") from err
    torch.cuda.synchronize(device)
    return graph.replay
