"""Open multipart uploads under a partition's place in an S3 store: listed and aborted.

obstore sends a large file in parts (an S3 multipart upload). An upload it does not
finish, because the connection was cut or the process died, stays open in the bucket:
its parts are stored (and billed) but belong to no object, no listing of objects shows
them, and obstore can neither list nor abort them. The sync's sweep asks here instead,
through botocore (S3's ListMultipartUploads and AbortMultipartUpload), with the store's
own settings: its endpoint, region and credentials (given, else botocore's own chain:
the environment, config files, instance roles). Only uploads under the partition's
prefix are touched, and only when no copy of this log is in flight (the sweep's rule),
so no upload still being sent is aborted.

A `file://` store's multipart upload is a staging file beside the object
(`<name>#<n>`, renamed into place when complete): one a killed process left is invisible
to listings, so the same sweep removes it. `memory://` stores have none.
"""

from __future__ import annotations

import os
import re
from urllib.parse import urlsplit

from ..errors import RemoteStorageError

__all__ = ["abort_open_uploads"]

_STAGING = re.compile(r"#\d+$")  # object_store's LocalFileSystem: `<object>#<n>`

# obstore's S3 option names (and their aws_ forms) -> botocore's client arguments
_CLIENT_ARGS = {"endpoint": "endpoint_url", "endpoint_url": "endpoint_url",
                "region": "region_name", "access_key_id": "aws_access_key_id",
                "secret_access_key": "aws_secret_access_key",
                "session_token": "aws_session_token", "token": "aws_session_token"}


def abort_open_uploads(url: str, options: dict, partition: str, timeout_ms: int) -> int:
    """Abort every open multipart upload under `<url>/<partition>/` (an S3 store; others
    have none); returns how many. One list request per 1000 uploads, one abort each.
    Raises RemoteStorageError."""
    parts = urlsplit(url)
    if parts.scheme == "file":
        return _remove_staging_files(os.path.join(parts.path, partition))
    if parts.scheme not in ("s3", "s3a"):
        return 0
    try:
        import botocore.config
        import botocore.exceptions
        import botocore.session
    except ImportError as e:
        raise RemoteStorageError("removing interrupted uploads needs botocore: "
                                 "pip install 'kdelay[remote]'") from e
    bucket = parts.netloc
    prefix = "/".join(p for p in (parts.path.strip("/"), partition) if p) + "/"
    args = {}
    for key, value in options.items():
        arg = _CLIENT_ARGS.get(key.lower().removeprefix("aws_"))
        if arg is not None:
            args[arg] = value
    virtual = str(options.get("virtual_hosted_style_request", "false")).lower() == "true"
    timeout = max(timeout_ms / 1000, 0.001)
    try:
        client = botocore.session.get_session().create_client("s3", config=botocore.config.Config(
            connect_timeout=timeout, read_timeout=timeout, retries={"max_attempts": 3},
            s3={"addressing_style": "virtual" if virtual else "path"}), **args)
        aborted = 0
        for page in client.get_paginator("list_multipart_uploads").paginate(
                Bucket=bucket, Prefix=prefix):
            for upload in page.get("Uploads", []):
                client.abort_multipart_upload(Bucket=bucket, Key=upload["Key"],
                                              UploadId=upload["UploadId"])
                aborted += 1
        return aborted
    except (botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError) as e:
        raise RemoteStorageError(f"aborting interrupted uploads under {url}/{partition}/ "
                                 f"failed: {type(e).__name__}: {e}") from e


def _remove_staging_files(directory: str) -> int:
    """Remove the staging files of interrupted uploads in a `file://` store's partition
    directory; returns how many. O(files there)."""
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return 0
    except OSError as e:
        raise RemoteStorageError(f"listing {directory} failed: {e}") from e
    removed = 0
    for name in names:
        if _STAGING.search(name):
            try:
                os.unlink(os.path.join(directory, name))
            except FileNotFoundError:
                continue
            except OSError as e:
                raise RemoteStorageError(f"removing {directory}/{name} failed: {e}") from e
            removed += 1
    return removed
