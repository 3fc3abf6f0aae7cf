"""A throwaway S3-protocol server on loopback, for tests and benchmarks.

``S3Server().start()`` runs moto's S3 server (``moto.server``, from PyPI's ``moto``, through
``moto_s3_main.py``, which makes its conditional puts atomic as AWS's are) in
a process of its own on 127.0.0.1 at a free port, waits until it answers, and ``stop()`` ends it.
It speaks the S3 REST protocol, conditional puts (``If-None-Match: *``) included, which delta-rs
uses to commit safely. A process of its own so the server's work never holds the test process's
interpreter lock, and so a test can kill the drivers it starts without touching the store.

No mock inside the code under test: spark-ckpt, delta-rs, pyarrow and Spark's s3a connector all
talk HTTP to this server exactly as to AWS.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from harness.servers.loopback import free_port

__all__ = ["S3Server"]

ACCESS_KEY = "spark-ckpt-test"
SECRET_KEY = "s3-secret-never-logged"  # the tests check that it never appears in errors or logs
REGION = "us-east-1"
_LAUNCHER = Path(__file__).with_name("moto_s3_main.py")  # moto.server, conditional puts atomic


class S3Server:
    """One moto S3 server process on 127.0.0.1.

    Parameters
    ----------
    port
        The port to listen on (default: a free one).
    checks_credentials
        Make the server verify every request's signature against an IAM user's key, as AWS
        does (moto's IAM enforcement). The server then issues its own key pair at start
        (``access_key``, ``secret_key``). Off by default: the shared test server accepts any
        key, which keeps it fast.
    """

    def __init__(self, port: int | None = None, *, checks_credentials: bool = False) -> None:
        self.port = port or free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.checks_credentials = checks_credentials
        self.access_key, self.secret_key = ACCESS_KEY, SECRET_KEY
        self._process: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 60.0) -> S3Server:
        """Start the server and wait (at most ``timeout`` seconds) until it answers."""
        self._process = subprocess.Popen(
            [sys.executable, str(_LAUNCHER), "-H", "127.0.0.1", "-p", str(self.port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # a test's SIGKILL of its drivers' sessions spares it
        )
        deadline = time.monotonic() + timeout
        while True:
            if self._process.poll() is not None:
                raise RuntimeError(
                    f"the S3 server exited with {self._process.returncode} at start: is moto "
                    f"installed (pip install 'moto[s3]' flask flask-cors)?"
                )
            try:
                with urllib.request.urlopen(self.endpoint + "/", timeout=2):
                    pass
            except OSError as e:
                if time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"the S3 server did not answer within {timeout:.0f}s") from e
                time.sleep(0.2)
                continue
            if self.checks_credentials:
                self._issue_credentials()
            return self

    def _issue_credentials(self) -> None:
        """Create an IAM user allowed everything on S3; from now on every request is checked.

        moto checks nothing until told how many unchecked requests remain: three, the ones
        that create the user, its policy and its key.
        """
        import boto3

        request = urllib.request.Request(
            self.endpoint + "/moto-api/reset-auth",
            data=b"3",
            method="POST",
            headers={"Content-Type": "text/plain"},
        )
        with urllib.request.urlopen(request, timeout=10):
            pass
        iam = boto3.client(
            "iam",
            endpoint_url=self.endpoint,
            region_name=REGION,
            aws_access_key_id=ACCESS_KEY,
            aws_secret_access_key=SECRET_KEY,
        )
        iam.create_user(UserName="spark-ckpt")
        policy = {
            "Version": "2012-10-17",
            "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}],
        }
        iam.put_user_policy(
            UserName="spark-ckpt", PolicyName="s3", PolicyDocument=json.dumps(policy)
        )
        key = iam.create_access_key(UserName="spark-ckpt")["AccessKey"]
        self.access_key, self.secret_key = key["AccessKeyId"], key["SecretAccessKey"]

    def stop(self) -> None:
        """Stop the server (its data is gone)."""
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)

    def options(self) -> dict[str, str]:
        """Storage options (delta-rs spelling) that reach this server."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "AWS_REGION": REGION,
        }

    def spark_conf(self) -> dict[str, str]:
        """Spark's s3a settings that reach this server (``spark.hadoop.fs.s3a.*``).

        ``spark_ckpt.install`` reads the same keys, so sources and sinks reach the server too.
        """
        return {
            "spark.hadoop.fs.s3a.endpoint": self.endpoint,
            "spark.hadoop.fs.s3a.endpoint.region": REGION,
            "spark.hadoop.fs.s3a.access.key": self.access_key,
            "spark.hadoop.fs.s3a.secret.key": self.secret_key,
            "spark.hadoop.fs.s3a.path.style.access": "true",
            "spark.hadoop.fs.s3a.connection.ssl.enabled": "false",
            # moto answers at once; fail fast instead of retrying for minutes.
            "spark.hadoop.fs.s3a.attempts.maximum": "3",
            "spark.hadoop.fs.s3a.retry.limit": "3",
        }

    def environment(self) -> dict[str, str]:
        """The same as environment variables, for processes that read the standard chain."""
        return {**self.options(), "AWS_DEFAULT_REGION": REGION}

    def create_bucket(self, name: str) -> None:
        """Create a bucket (one request to the server, signed with the test credentials)."""
        import pyarrow.fs as pafs

        fs = pafs.S3FileSystem(
            access_key=self.access_key,
            secret_key=self.secret_key,
            region=REGION,
            endpoint_override=f"127.0.0.1:{self.port}",
            scheme="http",
            allow_bucket_creation=True,
        )
        fs.create_dir(name)


if __name__ == "__main__":  # a server for a manual session: python -m harness.servers.s3
    server = S3Server().start()
    print(server.endpoint, flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        server.stop()
        os._exit(0)
