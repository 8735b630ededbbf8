"""cache.counters: a process's tallies, flushed by a thread of its own."""

import os

from cache import counters


def test_a_forked_child_flushes_its_own_tallies_not_its_parents():
    """The flushing thread starts once per process: a child forked after
    it (Celery's prefork pool, say) starts its own on its first count,
    and does not count again what the parent had not flushed yet."""
    tally = counters.counter
    tally.add("node-x", 2)
    assert tally.thread is not None
    assert tally.thread.is_alive()
    pid = os.fork()
    if pid == 0:  # the child: report through the exit code only
        fresh = tally.thread is None and tally.counts == {}
        tally.add("node-x", 1)
        counted = dict(tally.counts) == {"node-x": {counters.DELIVERED: 1}}
        running = tally.thread is not None and tally.thread.is_alive()
        os._exit(0 if fresh and counted and running else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert tally.counts == {"node-x": {counters.DELIVERED: 2}}
