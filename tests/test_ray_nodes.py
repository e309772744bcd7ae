"""Ray across nodes: a two-node Ray cluster on this machine (two raylets, each with its own object
store), a request built by an actor on one node and submitted to an actor on the other. The ids
must arrive whole and, once Ray has moved the object into the receiving node's store, be viewed
there: `np.asarray` of the received ids is a read-only view of the store's shared memory, not a
copy on the receiving worker's heap."""

from __future__ import annotations

import numpy as np
import pytest

from support import ray_nodes
from support.wait import WAIT_S

ray = pytest.importorskip("ray")

# Real subprocesses, sockets and clusters: `pytest -m "not integration"` skips them.
pytestmark = pytest.mark.integration

STORE = 96 * 1024**2


@pytest.fixture(scope="module")
def cluster():
    """The two-node cluster of `python -m bench e2e --ray --ray-nodes 2` (bench.harness), a
    resource on each node to place an actor there."""
    from bench.harness import ray_cluster

    ray.cloudpickle.register_pickle_by_value(ray_nodes)
    try:
        with ray_cluster(2, STORE, ("node_a", "node_b"), log_to_driver=False,
                         logging_level="ERROR"):
            yield
    finally:
        ray.cloudpickle.unregister_pickle_by_value(ray_nodes)


def test_requests_cross_nodes_and_are_viewed_in_the_receiving_object_store(cluster) -> None:
    receiver = ray.remote(num_cpus=0, resources={"node_b": 1})(ray_nodes.Receiver).remote()
    sender = ray.remote(num_cpus=0, resources={"node_a": 1})(ray_nodes.Sender).remote()
    rng = np.random.default_rng(7)
    sent = [rng.integers(0, 151_936, n, dtype=np.int32) for n in (40_000, 128_000)]
    sent[0][:2] = (-(2**31), 2**31 - 1)
    arrivals = ray.get(sender.send.remote(receiver, [s.tolist() for s in sent]), timeout=WAIT_S)
    sender_node = ray.get(sender.node.remote(), timeout=WAIT_S)
    for ids, got in zip(sent, arrivals):
        assert got.node_id != sender_node                     # the request crossed nodes
        assert got.prompt == ids.tobytes()
        assert got.held_as_vector
        # A view of the object store: read-only, in a shared file mapping (Ray's store is a
        # shared memory file), not a private copy (the heap or an anonymous mapping).
        assert not got.writeable
        fields = got.mapping.split()
        assert len(fields) >= 6 and fields[1].endswith("s"), got.mapping
        assert not fields[5].startswith("["), got.mapping
