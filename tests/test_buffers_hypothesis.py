"""Every entry point that takes a buffer, against a numpy reference.

`any_buffers` (tests/support/strategies.py) draws arrays of every numeric dtype in both byte orders,
0-d to 3-d, strided and reversed, as ndarrays or memoryviews. Each entry point either returns
what the numpy reference computes (after the documented conversion) or raises the documented
exception. The checks name the built-in base classes (ValueError, TypeError, OverflowError),
so they hold whatever tokenwire subclasses (its own error tree) the messages come with.
"""

from __future__ import annotations

import re
from typing import Callable

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import tokenwire
from support.strategies import CODECS, any_buffers, as_tokens_reference, frombuffer_reference
from tokenwire import TokenIds
from tokenwire.state import _TokenwireMixin as TokenwireMixin

BASES = (TypeError, OverflowError, ValueError)


def reference_outcome(reference: Callable[[object], list[int]], buf: object
                      ) -> tuple[list[int] | None, type[BaseException] | None]:
    try:
        return reference(buf), None
    except BASES as e:
        return None, type(e)


def assert_matches(expected: tuple[list[int] | None, type[BaseException] | None],
                   call: Callable[[], list[int]]) -> BaseException | None:
    """`call()` gives the reference's ids or raises the reference's exception class (and no
    broader one: an OverflowError is not accepted where a TypeError is documented)."""
    ids, error = expected
    if error is None:
        assert call() == ids
        return None
    with pytest.raises(BASES) as exc:
        call()
    assert isinstance(exc.value, error), (error, exc.value)
    if error is ValueError:
        assert not isinstance(exc.value, (TypeError, OverflowError)), exc.value
    return exc.value


def _check_message(buf: object, error: BaseException | None, prefix: str = "") -> None:
    """The message names what is wrong: the dtype, the shape, or the first bad index and value."""
    if error is None:
        return
    msg = str(error)
    assert msg.startswith(prefix), msg
    arr = np.asarray(buf)
    if isinstance(error, OverflowError):
        flat = [int(v) for v in arr]
        i = next(i for i, v in enumerate(flat) if not -(2**31) <= v < 2**31)
        assert f"token id at index {i} is {flat[i]}," in msg, msg
    elif isinstance(error, TypeError):
        assert "must be integers" in msg or "does not take raw bytes" in msg, msg
    else:
        assert f"got shape {arr.shape}" in msg, msg


@given(any_buffers())
def test_as_tokens_matches_numpy(buf: object) -> None:
    error = assert_matches(reference_outcome(as_tokens_reference, buf),
                           lambda: tokenwire.as_tokens(buf).tolist())
    _check_message(buf, error)


@given(any_buffers())
def test_tolist_matches_numpy(buf: object) -> None:
    error = assert_matches(reference_outcome(as_tokens_reference, buf),
                           lambda: tokenwire._core.tolist(buf))
    _check_message(buf, error)


@given(any_buffers(), st.sampled_from(CODECS), st.booleans())
def test_encode_matches_numpy(buf: object, codec: str, checksum: bool) -> None:
    ids, error = reference_outcome(as_tokens_reference, buf)
    if ids is not None and ((codec == "u16" and any(not 0 <= v < 2**16 for v in ids))
                            or (codec == "packed" and any(v < 0 for v in ids))):
        ids, error = None, ValueError       # a forced codec that cannot hold an id
    error_raised = assert_matches(
        (ids, error),
        lambda: tokenwire.decode(tokenwire.encode(buf, codec=codec, checksum=checksum)).tolist())
    if error is not ValueError or ids is not None:
        _check_message(buf, error_raised)


@given(any_buffers())
def test_frombuffer_matches_numpy(buf: object) -> None:
    ids, error = reference_outcome(frombuffer_reference, buf)
    if error is None:
        assert tokenwire.TokenVector.frombuffer(buf).tolist() == ids
        return
    if error is TypeError:
        with pytest.raises(tokenwire.errors.TokenIdTypeError, match="does not hold token ids") as exc:
            tokenwire.TokenVector.frombuffer(buf)
        assert repr(memoryview(buf).format) in str(exc.value)
        return
    # numpy refuses a non-contiguous ndarray with ValueError, a memoryview with BufferError
    with pytest.raises((ValueError, BufferError)) as exc:
        tokenwire.TokenVector.frombuffer(buf)
    if np.asarray(buf).flags.c_contiguous:
        assert isinstance(exc.value, ValueError)
        assert re.search(rf"got {np.asarray(buf).nbytes} bytes", str(exc.value)), exc.value


class Request(TokenwireMixin):
    prompt_token_ids = TokenIds()


@given(any_buffers())
def test_token_ids_assignment_matches_numpy(buf: object) -> None:
    req = Request()
    expected = reference_outcome(as_tokens_reference, buf)

    def assign() -> list[int]:
        req.prompt_token_ids = buf
        return req.prompt_token_ids

    error = assert_matches(expected, assign)
    _check_message(buf, error, prefix="Request.prompt_token_ids: ")
    if error is not None:
        # nothing partial: a refused value leaves the field unset
        assert not hasattr(req, "prompt_token_ids")
    else:
        assert tokenwire.token_buffer(req, "prompt_token_ids").tolist() == expected[0]


@pytest.mark.parametrize("fn", [tokenwire.encode, tokenwire._core.tolist])
def test_datetime_arrays_are_refused_like_as_tokens(fn: Callable[[object], object]) -> None:
    for dtype in ("M8[s]", "m8[ns]"):
        with pytest.raises(TypeError):
            tokenwire.as_tokens(np.zeros(2, dtype))
        with pytest.raises(TypeError):
            fn(np.zeros(2, dtype))
