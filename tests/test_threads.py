"""Threads running at once: what tokenwire promises where an object is shared
(docs/api/threads.rst).

On free-threaded CPython (3.13t, 3.14t) Python threads run in parallel: a list can be resized
while C code reads it, a lazily filled slot can be filled by two threads at once. Each race runs
in a fresh interpreter (`isolated`): a crash is then a failed test naming its signal, not the
end of the session, and process-wide state (the int table) starts empty. Threads start together
at a barrier; each test also checks that the race really happened (the other thread ran during
the calls), so it cannot pass by running the threads one after another. On a build with the GIL
the same tests run and must pass as well (there the threads interleave rather than overlap).

Each protection was planted out once on 3.13t to watch its test fail (docs/design.md,
"Free-threaded CPython"): the list's critical section, in as_tokens, TokenVector.__eq__ and
the C++ hand-off (the reader crashes: SIGSEGV), the int table's compare-and-swap (two objects
for one id), the aligned copy's compare-and-swap (two copies), the field's one publication
(two lists for one field), the class configuration's one computation ("dictionary changed size
during iteration").
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import tempfile
import textwrap

import pytest

FREE_THREADED = bool(sysconfig.get_config_var("Py_GIL_DISABLED"))


def isolated(code: str, race: bool = False, timeout: float = 3600) -> str:
    """Run `code` in a fresh interpreter (this one, PYTHON_GIL unset: a free-threaded build runs
    without the GIL unless a module turns it on), after RACE's helpers with `race`; its stdout,
    or a failure with its output and how it ended (a signal by name). The timeout only catches
    a hang: a race waits for its conditions with deadlines of its own (DEADLINE below)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHON_GIL"}
    source = (RACE if race else "") + textwrap.dedent(code)
    # From a directory of its own: the clone's root would put its tokenwire/ sources (built for
    # another interpreter, or not at all) before the installed package.
    proc = subprocess.run([sys.executable, "-W", "error", "-c", source], env=env,
                          capture_output=True, text=True, timeout=timeout,
                          cwd=tempfile.gettempdir())
    if proc.returncode != 0:
        how = (f"signal {-proc.returncode}" if proc.returncode < 0
               else f"exit status {proc.returncode}")
        pytest.fail(f"the threads' process ended with {how}:\n{proc.stdout}\n{proc.stderr}")
    return proc.stdout


# The preamble of every race: threads released together at a barrier (`race`, one race; `racing`,
# trials that race the same threads again and again).
RACE = """
import os, sys, threading, time
from contextlib import contextmanager
THREADS = 8
DEADLINE = 120       # s: how long a thread waits for a condition before it fails, naming it

def race(work, threads=THREADS, extra=None):
    barrier = threading.Barrier(threads + (extra is not None))
    errors = []
    def run(i):
        barrier.wait()
        try:
            work(i)
        except BaseException as e:
            errors.append(e)
            raise
    ts = [threading.Thread(target=run, args=(i,)) for i in range(threads)]
    if extra is not None:
        ts.append(threading.Thread(target=lambda: (barrier.wait(), extra())))
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    if errors:
        raise errors[0]

# A barrier for `parties` threads, used again and again, whose waiters spin: each looks at the
# gate, yields its core (sched_yield; sleep(0) where there is none) and looks again.
# threading.Barrier puts its waiters to sleep and wakes them one after another, each then
# waiting for a core: on a machine whose cores are busy with other work a pass takes tens of
# milliseconds, which a race of 1,000 trials pays 1,000 times; a spinning waiter that gets a
# core sees the release at once. A waiter that waits DEADLINE s (a thread that never came)
# raises AssertionError; one that is aborted raises Aborted.
yield_core = getattr(os, "sched_yield", lambda: time.sleep(0))

class Aborted(Exception):
    pass

class Gate:
    def __init__(self, parties):
        self.parties, self.arrived, self.generation = parties, 0, 0
        self.broken = False
        self.lock = threading.Lock()
    def wait(self):
        with self.lock:
            generation = self.generation
            self.arrived += 1
            if self.arrived == self.parties:
                self.arrived, self.generation = 0, generation + 1
        start = time.monotonic()
        while self.generation == generation:
            if self.broken:
                raise Aborted
            if time.monotonic() - start > DEADLINE:
                raise AssertionError(f"{self.arrived} of {self.parties} threads came to the "
                                     f"gate in {DEADLINE} s")
            yield_core()
    def abort(self):
        self.broken = True

# Trials that each race the same `threads` threads: `with racing(work) as race_once:` starts
# them once; each call race_once() releases them together at a gate to run work(i) once each,
# and returns when all have finished (raising the first error a thread met, naming its trial
# on stderr). The caller sets a trial up before race_once() and checks it after; no thread is
# started per trial.
@contextmanager
def racing(work, threads=THREADS):
    start, end = Gate(threads + 1), Gate(threads + 1)
    errors, stop, calls = [], [False], [0]
    def run(i):
        try:
            while True:
                start.wait()
                if stop[0]:
                    return
                try:
                    work(i)
                except BaseException as e:
                    errors.append(e)
                end.wait()
        except Aborted:                # the trials ended with an error, in this thread or not
            return
    def race_once():
        calls[0] += 1
        start.wait()
        end.wait()
        if errors:
            print(f"a thread failed in trial {calls[0] - 1} (counting from 0)", file=sys.stderr)
            raise errors[0]
    ts = [threading.Thread(target=run, args=(i,)) for i in range(threads)]
    for t in ts:
        t.start()
    try:
        yield race_once
        stop[0] = True
        start.wait()
    finally:
        start.abort()              # after an error: a thread still waiting ends
        end.abort()
        for t in ts:
            t.join()

# work() while writer(done) runs in a thread of its own until done is set.
def while_writing(writer, work):
    done = threading.Event()
    w = threading.Thread(target=writer, args=(done,))
    w.start()
    try:
        work()
    finally:
        done.set()
        w.join()

# A reader's loop, until the race is seen: the writer has made `min_writes` writes since this
# reader started, and `seen` holds two sizes; at least 0.5 s (more calls overlap the writes).
# Conditions, not a time: on a machine whose cores are busy it only takes longer. At DEADLINE s
# it gives up, naming what it did not see (the reader's exception fails the race). Each write
# that meets the readers in the list's lock waits for them; 100 writes are far more than a
# reader without that lock needs to crash or to see a list that never was.
def reading(seen, writes, min_writes=100):
    import time
    start, first = time.monotonic(), writes[0]
    def seen_enough():
        return writes[0] - first >= min_writes and len(seen) >= 2
    while time.monotonic() - start < 0.5 or not seen_enough():
        if time.monotonic() - start > DEADLINE:
            raise AssertionError(
                f"the race was not seen in {DEADLINE} s: the writer made {writes[0] - first} "
                f"writes during this reader's calls (wanted {min_writes}), the readers saw "
                f"{len(seen)} list sizes (wanted 2)")
        yield
"""


def test_importing_tokenwire_keeps_the_gil_off() -> None:
    """A serving process that chose a free-threaded interpreter keeps it: importing tokenwire
    and each of its modules (warnings are errors: CPython warns when it turns the GIL on for a
    module) leaves the GIL off."""
    if not FREE_THREADED:
        pytest.skip("needs a free-threaded build (Py_GIL_DISABLED): this one has the GIL")
    out = isolated("""
        import importlib, sys
        assert not sys._is_gil_enabled(), "the GIL is on before any import"
        names = ["tokenwire", "tokenwire.transport", "tokenwire.shm", "tokenwire.text",
                 "tokenwire.unpickle", "tokenwire.state", "tokenwire.wires",
                 "tokenwire.cli"]
        for extra, name in (("msgspec", "tokenwire.msgspec"), ("pydantic_core", "tokenwire")):
            try:
                importlib.import_module(extra)
            except ImportError:
                continue
            names.append(name)
        for name in names:
            importlib.import_module(name)
            assert not sys._is_gil_enabled(), f"importing {name} turned the GIL on"
        import tokenwire
        tokenwire.as_tokens(list(range(10)))
        print("off", len(names))
    """)
    assert out.startswith("off")


def test_as_tokens_of_a_list_another_thread_resizes() -> None:
    """8 threads convert one list while another thread appends to it and clears it: no crash,
    and every result is the list as it was at some moment (0, 1, 2, ... k-1 for some k: the
    writer only ever appends the next ids, or clears). Then they compare vectors with it. The
    list is read inside its critical section (its lock, without the GIL), by as_tokens and by
    TokenVector.__eq__, so an append that moves its items waits."""
    out = isolated(race=True, code="""
        import numpy as np, tokenwire
        lst = []
        writes = [0]
        def writer(done):
            while not done.is_set():
                n = len(lst)
                if n > 60_000:
                    lst.clear()
                else:
                    lst.extend(range(n, n + 997))
                writes[0] += 1
        sizes = set()
        def reader(i):
            for _ in reading(sizes, writes):
                tv = tokenwire.as_tokens(lst)
                ids = np.frombuffer(tv, np.int32)
                assert np.array_equal(ids, np.arange(len(ids), dtype=np.int32)), \\
                    f"a result that the list never was ({len(ids)} ids)"
                sizes.add(len(ids))
                assert tv == list(range(len(ids)))     # TokenVector.__eq__ of a list
        while_writing(writer, lambda: race(reader))
        # TokenVector.__eq__ against the list being resized, from the readers' side: ids of the
        # length the list had a moment before, so that the items are compared (a length that
        # differs answers False before any item is read); equal at two lengths at least.
        ids = tokenwire.TokenVector(range(70_000))
        equal = set()
        def comparer(i):
            for _ in reading(equal, writes):
                n = len(lst)
                if ids[:n] == lst:
                    equal.add(n)
        while_writing(writer, lambda: race(comparer))
        print("ok", writes[0])
    """)
    assert out.startswith("ok")


@pytest.fixture(scope="module")
def pybind_engine(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The pybind11 engine stand-in (tests/cpp/pybind_engine.cpp), built for this interpreter:
    its `to_vector_bytes` is the C++ hand-off, tokenwire/python.hpp."""
    pytest.importorskip("pybind11")
    from support.cpp_harness import compile_pybind_engine, require_compiler
    require_compiler()
    return str(compile_pybind_engine(tmp_path_factory.mktemp("pybind-engine")))


def test_cpp_to_vector_of_a_list_another_thread_resizes(pybind_engine: str) -> None:
    """The C++ hand-off reads a list as as_tokens does, inside the list's critical section: 8
    threads convert two lists while another thread appends to them and clears them, and every
    result is a list as it was at some moment. The second list starts with an int subclass, so
    its typed loop stops at once and as_tokens' own conversion of the rest (the capsule
    tokenwire._core._items_into_v1) reads it, under the same lock."""
    out = isolated(race=True, code=f"""
        import importlib.util, time
        import numpy as np
        spec = importlib.util.spec_from_file_location("_tokenwire_pybind_engine",
                                                      {pybind_engine!r})
        ext = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(ext)
        import sysconfig
        assert not (sysconfig.get_config_var("Py_GIL_DISABLED") and sys._is_gil_enabled()), \\
            "the engine turned the GIL on"

        class IntSub(int):
            pass

        lists = [[], [IntSub(0)]]
        writes = [0]
        def writer(done):
            while not done.is_set():
                for lst in lists:
                    n = len(lst)
                    if n > 60_000:
                        del lst[1 if type(lst[0]) is IntSub else 0:]
                    else:
                        lst.extend(range(n, n + 997))
                writes[0] += 1
        sizes = (set(), set())                      # the sizes each list was seen at
        def reader(i):
            lst, seen = lists[i % 2], sizes[i % 2]
            for _ in reading(seen, writes):
                ids = np.frombuffer(ext.to_vector_bytes(lst), np.int32)
                assert np.array_equal(ids, np.arange(len(ids), dtype=np.int32)), \\
                    f"a result that the list never was ({{len(ids)}} ids)"
                seen.add(len(ids))
        while_writing(writer, lambda: race(reader))
        print("ok", writes[0])
    """)
    assert out.startswith("ok")


def test_tolist_fills_each_int_table_slot_once() -> None:
    """8 threads materialize the same ids, whose int-table slots are all empty at the start (a
    fresh process; ids no import touches): every list is equal, and each id is one object in
    all of them -- the one its slot holds. The slot is filled by one compare-and-swap; a thread
    that lost the race took the winner's object and dropped its own."""
    out = isolated(race=True, code="""
        import numpy as np, tokenwire
        ids = np.arange(200_000, 262_144, dtype=np.int32)     # never materialized before
        tv = tokenwire.as_tokens(ids)
        lists = [None] * THREADS
        def work(i):
            lists[i] = tokenwire._core.tolist(tv)
        race(work)
        first = lists[0]
        assert all(lst == first for lst in lists)
        shared = sum(all(lst[k] is first[k] for lst in lists) for k in range(len(first)))
        assert shared == len(first), f"{len(first) - shared} ids were more than one object"
        again = tokenwire._core.tolist(tv)
        assert all(a is b for a, b in zip(again, first)), "the table holds another object"
        # Each slot's object: the table's reference, one per list holding it, and the ones
        # counted here; a loser's object, not dropped, would leave more than this.
        counts = {sys.getrefcount(first[k]) for k in range(0, len(first), 7)}
        assert len(counts) == 1, f"reference counts differ between ids: {sorted(counts)}"
        print("ok")
    """)
    assert out.startswith("ok")


def test_an_unaligned_views_aligned_copy_is_made_once() -> None:
    """A vector that views a frame at an unaligned address (decode reads such a frame in place)
    makes an aligned copy of its ids the first time someone takes its buffer. 8 threads take it
    at once, 1,000 times: all get the same copy (one address), and the vector owns exactly
    one."""
    out = isolated(race=True, code="""
        import numpy as np, tokenwire
        frame = tokenwire.encode(np.arange(30_000, dtype=np.int32), codec="raw")
        src = b"\\0" + frame                           # the payload at an odd address
        arrays = [None] * THREADS
        def take(i):
            arrays[i] = np.frombuffer(tv, np.int32)
        with racing(take) as race_once:
            for trial in range(1000):
                tv = tokenwire.decode(memoryview(src)[1:])
                viewing = tv.__sizeof__()
                arrays[:] = [None] * THREADS
                race_once()
                addrs = {a.__array_interface__["data"][0] for a in arrays}
                assert len(addrs) == 1, f"trial {trial}: {len(addrs)} copies"
                assert addrs.pop() % 4 == 0 and tv.__sizeof__() == viewing + 4 * 30_000
                assert all(np.array_equal(a, np.arange(30_000)) for a in arrays)
        print("ok")
    """)
    assert out.startswith("ok")


def test_a_fields_first_read_publishes_one_list() -> None:
    """8 threads read the token field of a freshly unpickled request for the first time, at
    once: every one gets the same list object, and an append made through it is seen by all,
    and by the next pickle. 300 requests."""
    out = isolated(race=True, code="""
        import pickle, tokenwire
        from tokenwire.request import GenerationRequest
        data = pickle.dumps(GenerationRequest(list(range(20_000))), protocol=5)
        got = [None] * THREADS
        def read(i):
            got[i] = req.prompt_token_ids
        with racing(read) as race_once:
            for trial in range(300):
                req = pickle.loads(data)
                got[:] = [None] * THREADS
                race_once()
                assert all(g is got[0] for g in got), \
                    f"trial {trial}: {len(set(map(id, got)))} lists"
                got[3].append(7)
                assert all(g[-1] == 7 for g in got) and req.prompt_token_ids[-1] == 7
                assert pickle.loads(pickle.dumps(req, protocol=5)).prompt_token_ids[-1] == 7
        print("ok")
    """)
    assert out.startswith("ok")


def test_a_classs_first_pickles_from_threads() -> None:
    """8 threads pickle the first objects of a class at once, 200 classes: its configuration
    (computed on first use and cached on the class) is computed and published once, and no
    thread trips over the class dict another one adds to meanwhile (found by the transport
    test below as "dictionary changed size during iteration")."""
    out = isolated(race=True, code="""
        import pickle, tokenwire
        from tokenwire.request import GenerationRequest
        out = [None] * THREADS
        def work(i):
            out[i] = pickle.dumps(objs[i], protocol=5)
        with racing(work) as race_once:
            for trial in range(200):
                # a class dict of some size: iterating it takes long enough to overlap a setattr
                body = {"__module__": __name__, **{f"setting_{k}": k for k in range(500)}}
                cls = type(f"Request{trial}", (GenerationRequest,), body)
                globals()[cls.__name__] = cls                  # where pickle finds the class
                objs = [cls(list(range(i, i + 100))) for i in range(THREADS)]
                out[:] = [None] * THREADS
                race_once()
                assert "_tokenwire_config" in vars(cls)
                assert all(pickle.loads(o).prompt_token_ids == objs[i].prompt_token_ids
                           for i, o in enumerate(out)), trial
        print("ok")
    """)
    assert out.startswith("ok")


def test_shared_vectors_and_frames_from_threads() -> None:
    """One TokenVector and its frames, shared by 8 threads: encode (every codec), decode,
    decode_many, to_base64 / from_base64, tolist and pickling, each result checked id by id
    against what one thread computed first."""
    out = isolated(race=True, code="""
        import pickle, numpy as np, tokenwire
        rng = np.random.default_rng(0)
        tv = tokenwire.as_tokens(rng.integers(0, 151_936, 30_000, dtype=np.int32))
        ref = np.frombuffer(tv, np.int32).copy()
        codecs = ["raw", "u16", "packed", "pfor", "auto"]
        codecs = [c for c in codecs if c != "u16"]            # ids above 65535
        frames = {c: tokenwire.encode(tv, codec=c, checksum=True) for c in codecs}
        many = tokenwire.encode_many([tv, tv[:100]], codec="pfor")
        text = tokenwire.to_base64(tv, codec="pfor")
        def check(v):
            assert np.array_equal(np.frombuffer(v, np.int32), ref)
        def work(i):
            for _ in range(20):
                for c in codecs:
                    assert tokenwire.encode(tv, codec=c, checksum=True) == frames[c]
                    check(tokenwire.decode(frames[c]))
                a, b = tokenwire.decode_many(many)
                check(a)
                assert b == tv[:100]
                check(tokenwire.from_base64(text))
                assert tokenwire.to_base64(tv, codec="pfor") == text
                assert tokenwire._core.tolist(tv) == ref.tolist()
                check(pickle.loads(pickle.dumps(tv, protocol=5)))
                check(pickle.loads(pickle.dumps(tv, protocol=2)))
        race(work)
        print("ok")
    """)
    assert out.startswith("ok")


def test_transport_and_msgspec_from_threads() -> None:
    """`dumps_oob` / `loads_oob` with one key, signed and with codecs, from 8 threads at once;
    and, where msgspec is installed, one msgspec `Encoder` and one `Decoder` shared by them
    (their documented contract: encode and decode may be called from any thread)."""
    out = isolated(race=True, code="""
        import secrets, numpy as np, tokenwire
        from tokenwire.transport import dumps_oob, loads_oob
        from tokenwire.request import GenerationRequest
        key = secrets.token_bytes(32)
        find = lambda m, n: tokenwire.unpickle.find_class(m, n, allow={("tokenwire.request",
                                                               "GenerationRequest")})
        def work(i):
            ids = list(range(i * 1000, i * 1000 + 40_000))
            for r in range(20):
                codec = ("raw", "pfor", "packed")[r % 3]
                frames = dumps_oob(GenerationRequest(ids), key=key, codec=codec)
                got = loads_oob([bytes(f) for f in frames], key=key, find_class=find)
                assert got.prompt_token_ids == ids
        race(work)
        try:
            import msgspec
        except ImportError:
            print("ok no-msgspec")
            raise SystemExit(0)
        import tokenwire.msgspec as tm
        class Req(msgspec.Struct):
            rid: str
            prompt: tokenwire.TokenVector
        enc, dec = tm.Encoder(), tm.Decoder(Req)
        def work2(i):
            tv = tokenwire.as_tokens(range(i, i + 30_000))
            for r in range(50):
                got = dec.decode([bytes(f) for f in enc.encode(Req(f"r{i}-{r}", tv))])
                assert got.rid == f"r{i}-{r}" and got.prompt == tv
        race(work2)
        print("ok")
    """)
    assert out.startswith("ok")
