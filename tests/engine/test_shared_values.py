"""Steps unpickled one message each (as the compute processes send them) share their request ids and
block ids with the steps already held (core/shared_values.py), and read exactly as they were sent."""

from __future__ import annotations

import pickle

from pagedviz.core import Scenario, make_engine
from pagedviz.core.trace import BlockOwners


def test_steps_unpickled_one_by_one_share_their_request_ids_and_read_the_same() -> None:
    scenario = Scenario.from_dict(
        {
            "name": "shared",
            "seed": 0,
            "config": {"block_size": 4, "max_model_len": 64, "num_kv_blocks": 600, "model": None},
            "requests": [{"id": f"req-{i}", "prompt_len": 8, "max_tokens": 6} for i in range(12)],
            "max_steps": 20,
        }
    )
    sent = []
    for t in make_engine(scenario).run():
        t.array_entries  # noqa: B018 - as the compute process builds them before sending
        t.compact()
        sent.append(t)
    wires = [pickle.dumps(t, protocol=pickle.HIGHEST_PROTOCOL) for t in sent]
    got = [pickle.loads(w) for w in wires]
    assert [t.to_dict() for t in got] == [t.to_dict() for t in sent]
    a, b = got[2], got[3]  # two decode steps of the same requests, unpickled apart
    keys_a, keys_b = list(a.scheduler["block_ids"]), list(b.scheduler["block_ids"])
    assert keys_a == keys_b and all(x is y for x, y in zip(keys_a, keys_b))
    rid = keys_a[0]
    assert a.batch["req_ids"][0] is b.batch["req_ids"][0] is rid
    assert next(iter(b.sampled_token_ids)) is next(iter(a.sampled_token_ids))
    assert type(a.scheduler["block_ids"]) is dict and type(a.scheduler["block_ids"][rid]) is list
    big = [x for t in got for lists in t.scheduler["block_ids"].values() for ids in lists for x in ids]
    assert big, "the scenario holds block ids"
    # the pool's owners too: one request id object however many steps name it
    owners = [t.kv_cache["owners"] for t in got if isinstance(t.kv_cache.get("owners"), BlockOwners)]
    assert len(owners) >= 2
    named = {r: r for o in owners for r in o.req_ids}
    assert all(r is named[r] for o in owners for r in o.req_ids)
