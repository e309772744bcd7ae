"""How long a test waits for another process or thread to do what it must: one deadline for
every such wait in the suite (a message to arrive, a process to start, answer or exit, a thread
to reach a point or end, a Ray call to return).

A test waits for the condition and fails only when this deadline passes, so it must lie far
above what the work needs on a machine whose cores are busy with other work, whatever the
interpreter. The slowest case measured here: free-threaded CPython 3.13.5 with every core held
by other processes, where a child interpreter takes 20 to 40 s to import numpy: closing each
file it reads locks an object the thread has locked already, and that interpreter's mutex calls
sched_yield 40 times before it waits, some 18,000 yields for numpy, each handing the core to
another process for its time slice. A wait for something that must NOT happen (nothing
arrives, nothing is left over) keeps its own short time. tests/test_threads.py's races keep
their DEADLINE: it starts after the child's imports, and a race with its protection planted out
must fail within a CI step. A run whose own work takes longer names its own, longer time (the
two-node Ray benchmark, a thread race's whole process).
"""

#: Seconds.
WAIT_S = 600.0
#: Milliseconds (zmq's RCVTIMEO and poll).
WAIT_MS = int(WAIT_S * 1000)
