"""Run moto's S3 server with conditional puts made atomic, as AWS S3 makes them.

moto checks ``If-None-Match: *`` and then stores the object in two steps, and its server handles
requests on threads, so two racing conditional PUTs of one key can both be stored (a CI run saw
two winners of eight racing ``create_bytes``). AWS S3 guarantees that of concurrent conditional
writes of one key one succeeds and the others get 412 (or 409 ConditionalRequestConflict), which
is what delta-rs's and our commits rely on. This launcher serializes moto's ``put_object``
handler so that the fake keeps the guarantee the real store gives; nothing else changes.

Run as ``python moto_s3_main.py -H 127.0.0.1 -p PORT`` (the arguments of ``moto.server``).
"""

from __future__ import annotations

import functools
import sys
import threading
from typing import Any

from moto.s3.responses import S3Response
from moto.server import main

_unpatched_put_object = S3Response.put_object
_one_put_at_a_time = threading.Lock()


@functools.wraps(_unpatched_put_object)
def _put_object_atomically(self: S3Response) -> Any:
    with _one_put_at_a_time:
        return _unpatched_put_object(self)


S3Response.put_object = _put_object_atomically  # type: ignore[method-assign]

if __name__ == "__main__":
    main(sys.argv[1:])
