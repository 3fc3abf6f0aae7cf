"""How a location is reached: endpoint, region and credentials, with secrets masked (pure).

Keys use delta-rs's names, the spelling users already know from its ``storage_options``; Spark's
``spark.hadoop.fs.s3a.*`` settings translate into them (:func:`s3a_options`). Where the layers
come from and which wins is :mod:`spark_ckpt.state.storage`'s story; this module is only the
values. Runs on the driver and on executors (options travel with every pickled location).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from spark_ckpt.errors import ConfigError
from spark_ckpt.model.uris import canonical_uri, split_uri

__all__ = ["S3A_KEYS", "StorageOptions", "refuse_unsafe_settings", "s3a_options"]

_SECRET_WORDS = ("secret", "password", "token", "key", "credential", "sas", "signature")

# spark.hadoop.fs.s3a.* keys -> spark-ckpt's storage option names (delta-rs's spelling).
S3A_KEYS = {
    "fs.s3a.endpoint": "AWS_ENDPOINT_URL",
    "fs.s3a.endpoint.region": "AWS_REGION",
    "fs.s3a.access.key": "AWS_ACCESS_KEY_ID",
    "fs.s3a.secret.key": "AWS_SECRET_ACCESS_KEY",
    "fs.s3a.session.token": "AWS_SESSION_TOKEN",
    "fs.s3a.path.style.access": "AWS_PATH_STYLE",
    "fs.s3a.connection.ssl.enabled": "AWS_SSL",
}


def _is_secret(key: str) -> bool:
    lowered = key.lower()
    return any(word in lowered for word in _SECRET_WORDS) and "region" not in lowered


@dataclass(frozen=True)
class StorageOptions:
    """Endpoint, region and credential settings, with secrets masked whenever printed.

    Keys use delta-rs's names (``AWS_ENDPOINT_URL``, ``AWS_REGION``, ``AWS_ACCESS_KEY_ID``, ...,
    ``GOOGLE_SERVICE_ACCOUNT``, ``AZURE_STORAGE_ACCOUNT_KEY``); they are case-insensitive.
    """

    values: tuple[tuple[str, str], ...] = ()

    @classmethod
    def of(cls, *layers: Mapping[str, str]) -> StorageOptions:
        """Merge layers of options, later ones overriding earlier ones."""
        merged: dict[str, str] = {}
        for layer in layers:
            for key, value in layer.items():
                merged[key.upper()] = value
        return cls(tuple(sorted(merged.items())))

    def get(self, key: str) -> str | None:
        """The value of ``key`` (any case), or None."""
        wanted = key.upper()
        return next((v for k, v in self.values if k == wanted), None)

    def as_dict(self) -> dict[str, str]:
        """The options as a dict (for a client; never for a message)."""
        return dict(self.values)

    def __repr__(self) -> str:
        shown = ", ".join(f"{k}={'***' if _is_secret(k) else v}" for k, v in self.values)
        return f"StorageOptions({shown})"

    __str__ = __repr__


def s3a_options(conf: Mapping[str, str]) -> dict[str, str]:
    """Spark's ``spark.hadoop.fs.s3a.*`` settings as storage options (driver, at install).

    ``conf`` maps Spark configuration keys to values (with or without ``spark.hadoop.``).
    """
    out: dict[str, str] = {}
    for key, value in conf.items():
        name = key.removeprefix("spark.hadoop.")
        option = S3A_KEYS.get(name)
        if option is not None and value.strip():
            out[option] = value.strip()
    return out


def refuse_unsafe_settings(uri: str, options: StorageOptions) -> None:
    """Refuse settings under which a Delta table at ``uri`` could lose exactly-once (pure).

    ``AWS_S3_ALLOW_UNSAFE_RENAME=true`` lets two writers both commit one Delta version on S3.
    Checked when the sink's options are parsed and again when delta-rs is handed the options.

    Raises
    ------
    ConfigError
        Naming the setting and what to do instead.
    """
    if split_uri(uri)[0] not in ("s3", "s3a"):
        return
    if (options.get("AWS_S3_ALLOW_UNSAFE_RENAME") or "").lower() == "true":
        raise ConfigError(
            f"storage option AWS_S3_ALLOW_UNSAFE_RENAME=true for {canonical_uri(uri)}: two "
            f"writers could both commit one Delta version, so exactly-once cannot "
            f"hold. Remove it; commits use S3 conditional puts (or set "
            f"AWS_S3_LOCKING_PROVIDER=dynamodb)"
        )
