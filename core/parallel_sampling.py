"""Parallel sampling (a request's `n`) as vLLM V1's engine does it: the request fans out into n
child requests before the scheduler sees it (`ParentRequest`, vllm/v1/engine/parallel_sampling.py;
`LLMEngine.add_request` / `AsyncLLM.add_request` add the children in index order). A child is
named `{index}_{request_id}` (`ParentRequest.get_child_info`) and has the parent's prompt,
arrival and priority; to the scheduler it is a request like any other.

There is no copy-on-write in V1: the children share the prompt's full blocks only through
prefix-cache hits (the first child computes and caches them, the next ones touch them, ref_cnt > 1),
and each child computes its own last, partial prompt block and its own outputs.
"""

from __future__ import annotations

import dataclasses

from pagedviz.core.scenario_parts import RequestSpec


def child_id(request_id: str, index: int) -> str:
    """vLLM's child request id (`ParentRequest.get_child_info`)."""
    return f"{index}_{request_id}"


def scheduled_specs(requests: tuple[RequestSpec, ...]) -> tuple[RequestSpec, ...]:
    """The requests as the scheduler sees them: a request with n > 1 as its n children, in index
    order, where the request stood; every spec carries its place in the scenario's list (`order`,
    its arrival order within a step; children share their parent's)."""
    out: list[RequestSpec] = []
    for order, r in enumerate(requests):
        if r.n == 1:
            out.append(dataclasses.replace(r, order=order))
            continue
        out.extend(
            dataclasses.replace(r, id=child_id(r.id, k), n=1, parent=r.id, index=k, order=order)
            for k in range(r.n)
        )
    return tuple(out)


def family(requests: tuple[RequestSpec, ...]) -> dict[str, dict[str, object]]:
    """`scheduler.parents` of the trace: each child's parent and index (empty without n > 1)."""
    return {
        child_id(r.id, k): {"parent": r.id, "index": k, "n": r.n}
        for r in requests
        if r.n > 1
        for k in range(r.n)
    }
