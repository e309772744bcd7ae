"""GenerationRequest, the reference drop-in request (tokenwire/request.py): round trips from
every id source, read or unread, at every protocol; the worker side re-pickles without building
a list; the _prompt_token_ids_i32 side channel. The parts it is built from have their own
tests: tests/test_fields.py, test_state.py, test_adopt.py."""

from __future__ import annotations

import copy
import pickle

import numpy as np
import pytest

pytest.importorskip("hypothesis")
from hypothesis import given  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from support.requests import PROTOCOLS, big_ids, from_wire, no_lists_in, roundtrip  # noqa: E402
from support.strategies import BOUNDARY_IDS, ID_SOURCES, as_source, token_lists  # noqa: E402

from tokenwire import GenerationRequest, TokenIds, TokenVector, token_buffer  # noqa: E402

PROMPT = GenerationRequest.prompt_token_ids


# --------------------------------------------------------------------------------------------
# round trips


@given(ids=token_lists, kind=st.sampled_from(ID_SOURCES), read=st.booleans(),
       protocol=st.sampled_from(list(PROTOCOLS)))
def test_roundtrip_any_source_read_or_unread(ids, kind, read, protocol):
    req = GenerationRequest(as_source(ids, kind), {"max_tokens": 8}, query_token_ids=ids[:3], id=7)
    if read:
        assert list(req.prompt_token_ids) == ids
    out = roundtrip(req, protocol)
    assert not PROMPT.is_materialized(out)          # decoding never builds the list
    assert token_buffer(out, "prompt_token_ids") == ids
    assert list(out.prompt_token_ids) == ids
    assert type(out.prompt_token_ids) is (tuple if kind == "tuple" else list)   # a tuple stays one
    assert out.query_token_ids == ids[:3]
    assert (out.sampling_params, out.id, out.streaming) == ({"max_tokens": 8}, 7, False)


@pytest.mark.parametrize("ids", [[], [0], BOUNDARY_IDS, big_ids()],
                         ids=["empty", "one", "boundary", "128k"])
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_roundtrip_edges(ids, protocol):
    out = roundtrip(GenerationRequest(ids), protocol)
    assert out.prompt_len == len(ids)
    assert out.prompt_token_ids == ids
    again = roundtrip(out, protocol)                   # re-pickle a materialized request
    assert again.prompt_token_ids == ids


def test_repickling_unread_request_never_materializes():
    ids = big_ids(40_000)
    worker_side = from_wire(ids)
    for protocol in PROTOCOLS:
        state = worker_side.__getstate__()
        assert type(state["prompt_token_ids"]) is TokenVector and no_lists_in(state)
        hop = roundtrip(worker_side, protocol)
        assert not PROMPT.is_materialized(worker_side)
        assert not PROMPT.is_materialized(hop)
        assert (token_buffer(hop, "prompt_token_ids")
                == token_buffer(worker_side, "prompt_token_ids"))
    copy.copy(worker_side), copy.deepcopy(worker_side), repr(worker_side), worker_side.prompt_len
    assert not PROMPT.is_materialized(worker_side)
    assert worker_side.prompt_token_ids == ids


class RemoteRequest(GenerationRequest):
    """The cross-host class docs/transport.md shows: the prompt pickled as a pfor frame."""

    prompt_token_ids = TokenIds(codec="pfor")


def test_a_subclass_that_declares_pfor_pickles_its_prompt_compact():
    """What a stack whose transport pickles the request itself (Ray, multiprocessing, MPI)
    declares for a hop between hosts. 40k ids spread over a 151,936-id vocabulary: raw they
    pickle to 160 KB, over Ray's 100 KiB inline limit; as pfor under it."""
    ids = np.random.default_rng(5).integers(0, 151_936, 40_000).tolist()
    limit = 100 * 1024
    assert len(pickle.dumps(GenerationRequest(ids), protocol=5)) > limit
    for protocol in PROTOCOLS:
        data = pickle.dumps(RemoteRequest(ids, id=7), protocol=protocol)
        if protocol >= 3:
            assert len(data) < limit
        back = pickle.loads(data)
        assert type(back) is RemoteRequest and back.id == 7 and back.prompt_len == len(ids)
        assert not PROMPT.is_materialized(back)
        assert token_buffer(back, "prompt_token_ids") == ids
        assert back.prompt_token_ids == ids
    assert RemoteRequest.prompt_token_ids.codec == "pfor"
    assert GenerationRequest.prompt_token_ids.codec == "raw"      # the base class is untouched


# --------------------------------------------------------------------------------------------
# the side channel


def test_side_channel_is_read_only():
    req = from_wire([1])
    with pytest.raises(AttributeError):
        req._prompt_token_ids_i32 = None
