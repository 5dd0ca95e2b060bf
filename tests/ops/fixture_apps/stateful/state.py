import asyncio
import functools
import queue
import threading
from collections import defaultdict, deque

SUBSCRIBERS = []  # module-level mutable list
USAGE = defaultdict(int)  # module-level counter dict
PENDING = queue.Queue()  # in-memory queue
RECENT = deque(maxlen=100)  # in-memory queue (bounded)
_client = None
refresher = threading.Timer(60, print)  # a timer created at import
threading.Thread(target=print).start()  # a thread started at import


class Registry:
    handlers = {}  # class-level mutable attribute
    name = "registry"  # an immutable class attribute: not state

    class Meta:
        ordering = ["name"]  # Django declaration: not state


@functools.lru_cache(maxsize=None)
def lookup(key):
    return key


def client():
    global _client  # a process-local singleton
    if _client is None:
        _client = object()
    return _client


async def consume():
    inbox = asyncio.Queue()  # local to one call: not process state
    return inbox


async def ticker():
    while True:  # a stream held open for one client in the serving process
        yield 1
