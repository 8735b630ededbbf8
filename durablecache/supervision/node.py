"""One node's supervisor: Daphne and the Celery worker as children, the
heartbeat and the tick, the handover and the stop (``manage.py runnode``)."""

import contextlib
import signal
import subprocess
import sys
import time
from typing import Any

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import CommandError

from cache import selectors as cache_selectors
from cache import services as cache_services
from clients import placement, replication
from clients import services as client_services
from clients.dispatch import tick_on
from durablecache.supervision import liveness, processes
from queues import notify
from queues import services as queue_services

CLOSE_SHUTDOWN = 4503
STOP_GRACE_S = 10


def kept_message(name: str, left: int, *, others_up: bool) -> str:
    """What a stopping node says of the queues it could not hand over.

    They stay in its store and are served again when it starts; with no
    other node up (the whole cluster stopping at once, as on Ctrl-C of
    ``runcluster``) that is the expected outcome, not a fault.
    """
    kept = (
        f"{name}: {left} queue(s) stay in {name}'s store, served again when "
        f"{name} starts"
    )
    if not others_up:
        return f"{kept} (no other node is up to take them)\n"
    return (
        f"{kept} (not handed over in time; a client with a complete copy on "
        "another node is served there meanwhile)\n"
    )


class Node:
    """Run one node until it is asked to stop, then hand its queues over."""

    def __init__(self, name: str, url: str, opts: dict[str, Any]) -> None:
        self.name, self.url, self.opts = name, url, opts
        self.children: list[subprocess.Popen[bytes]] = []
        self.stopping = False

    def run(self, out: Any) -> None:
        self.prepare()
        env = processes.child_env(
            DURABLECACHE_NODE_NAME=self.name, DURABLECACHE_NODE_URL=self.url
        )
        self.env = env
        self.children = [
            self.start_worker(),
            subprocess.Popen(
                processes.daphne_command(self.opts["host"], self.opts["port"]), env=env
            ),
        ]
        signal.signal(signal.SIGTERM, self.request_stop)
        signal.signal(signal.SIGINT, self.request_stop)
        # Ready: the HTTP side answers and the worker consumes tasks (a
        # write right after "ready" is fanned out at once, not after the
        # worker's start-up).
        up = processes.wait_http(f"{self.url}/healthz/", timeout=60, alive=self.alive)
        if not up or not liveness.wait_ready(
            pid=self.children[0].pid, timeout=60, alive=self.alive
        ):
            self.stop()
            raise CommandError(f"{self.name} did not come up")
        out.write(f"{self.name} {self.url} ready")
        out.flush()
        self.supervise()

    def prepare(self) -> None:
        """Create and migrate the node store; forget sockets of a past life."""
        processes.ensure_node_store()
        call_command("migrate", database="node", verbosity=0, interactive=False)
        # Up before the cursor is judged: from here on the other nodes'
        # pruning keeps every event after this node's last reported cursor,
        # so one pruned between the judgement and the registration cannot
        # leave a store judged complete with a gap behind it.
        cache_services.node_register(name=self.name, url=self.url)
        dropped = queue_services.cursor_init(
            node=self.name,
            head=cache_selectors.event_log_head(),
            oldest=cache_selectors.event_log_oldest(),
        )
        if dropped:
            sys.stderr.write(
                f"{self.name}: down past the event log's retention; dropped "
                f"{dropped} stale queue copies\n"
            )
        client_services.clients_node_restarted(node=self.name)

    def start_worker(self) -> subprocess.Popen[bytes]:
        command = processes.worker_command(self.name, self.opts["concurrency"])
        self.worker_started = time.monotonic()
        return subprocess.Popen(command, env=self.env)

    def restart_worker_if_dead(self) -> None:
        """Start the Celery worker again if it exited.

        The worker holds no state (rows are the truth): a worker that died,
        for example on a broker connection lost mid-close (kombu can raise
        there), is replaced; the node stays up.
        """
        worker = self.children[0]
        if worker.poll() is not None and not self.stopping:
            sys.stderr.write(
                f"{self.name}: worker exited ({worker.returncode}); restarting\n"
            )
            self.children[0] = self.start_worker()

    def restart_worker_if_stalled(self, ticks_since: float) -> bool:
        """Replace a worker that runs but has done nothing for too long.

        Stalled: no task started, ended or expired and no fan-out batch
        for ``DURABLECACHE_WORKER_STALL_S`` although ticks reached the broker
        all that time (``ticks_since``: monotonic time since when every tick
        was sent) — a broker outage is not the worker's fault. Before the
        kill, SIGUSR1 makes it write every thread's stack to its log.
        """
        limit = settings.DURABLECACHE_WORKER_STALL_S
        now = time.monotonic()
        worker = self.children[0]
        if (
            self.stopping
            or limit <= 0
            or worker.poll() is not None
            or now - max(ticks_since, self.worker_started) < limit
        ):
            return False
        idle = liveness.idle_for(liveness.alive_path())
        if idle < limit:
            return False
        sys.stderr.write(
            f"{self.name}: worker {worker.pid} did nothing for {idle:.0f}s while "
            "ticks were sent; its threads follow, then it is restarted\n"
        )
        with contextlib.suppress(OSError):
            worker.send_signal(signal.SIGUSR1)
            time.sleep(1.0)
        worker.kill()
        worker.wait(timeout=10)
        self.children[0] = self.start_worker()
        return True

    def alive(self) -> bool:
        return all(child.poll() is None for child in self.children)

    def request_stop(self, signum: int, frame: Any) -> None:
        self.stopping = True

    def supervise(self) -> None:
        interval = min(
            settings.DURABLECACHE_HEARTBEAT_S, settings.DURABLECACHE_EXPIRY_CHECK_S
        )
        # Heartbeating without a break since: only after a node timeout of
        # it does this node take others for dead (maintenance.tick).
        steady_since = time.monotonic()
        # Every tick since then reached the broker (the stall watchdog).
        ticks_since = time.monotonic()
        while not self.stopping:
            self.restart_worker_if_dead()
            self.restart_worker_if_stalled(ticks_since)
            if not self.alive():
                # Daphne died: the node is down; end the group like a crash.
                self.stop()
                sys.exit(1)
            if not self.heartbeat(interval):
                steady_since = time.monotonic()
            steady = time.monotonic() - steady_since
            judge = steady >= settings.DURABLECACHE_NODE_TIMEOUT_S
            ticks_since = self.tick(ticks_since, judge=judge)
            time.sleep(interval)
        self.shutdown()

    def tick(self, ticks_since: float, *, judge: bool) -> float:
        """Send the worker its tick; return the new ``ticks_since``.

        Sent whether or not the heartbeat went through: a worker stopped
        inside a write makes the heartbeat fail (it holds the lock), and
        the watchdog must still see that ticks reached the broker. A send
        that fails (``tick_on`` logs it) starts the window again.
        """
        return ticks_since if tick_on(self.name, judge=judge) else time.monotonic()

    def heartbeat(self, interval: float) -> bool:
        """Record this node alive, waiting at most ``interval`` for a lock."""
        try:
            cache_services.node_heartbeat(name=self.name, lock_wait_s=interval)
        except Exception as exc:
            sys.stderr.write(f"{self.name}: heartbeat failed: {exc}\n")
            return False
        return True

    def shutdown(self) -> None:
        """Graceful stop: hand the queues over, close sockets with 4503, exit.

        The worker keeps running while the queues are copied (it serves
        the pages); the handover gets ``DURABLECACHE_HANDOVER_S`` and what
        is left stays in this node's store for its restart.
        """
        try:
            cache_services.node_drain(name=self.name)
            left = replication.node_handover(
                node=self.name,
                deadline=time.monotonic() + settings.DURABLECACHE_HANDOVER_S,
                heartbeat=self.heartbeat_while_draining,
            )
            if left:
                others = [n for n in placement.Membership.read().up() if n != self.name]
                sys.stderr.write(kept_message(self.name, left, others_up=bool(others)))
            notify.close_node(self.name, CLOSE_SHUTDOWN)
        except Exception as exc:
            sys.stderr.write(f"{self.name}: drain failed: {exc}\n")
        time.sleep(0.5)
        self.stop()

    def heartbeat_while_draining(self) -> None:
        """Stay visible as draining (not dead) while handing over."""
        cache_services.node_heartbeat(name=self.name)

    def stop(self) -> None:
        for child in reversed(self.children):
            if child.poll() is None:
                child.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE_S
        for child in self.children:
            try:
                child.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait(timeout=5)
