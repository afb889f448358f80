"""Secrets as references: a profile says where a secret lives (an environment variable of
kctl's, a file; :class:`~kctl.profile.model.SecretRef`), never what it is. kctl reads the
value at the last moment (starting a server, sending it a request) and shows the reference
everywhere else: ``HF_TOKEN=<secret:env HF_TOKEN>``. A value read here is handed on and
never formatted into a message, a log line, a store row or an argv.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping

from kctl.errors import SecretUnavailable
from kctl.profile.model import Profile, SecretRef
from kctl.profile.secretnames import Hidden, looks_secret

__all__ = ["Hidden", "looks_secret", "describe", "resolve", "api_key", "shown_env"]

#: a secret file is a line or a few; anything larger is not a secret file
MAX_SECRET_BYTES = 64 * 1024


def describe(ref: SecretRef) -> str:
    """What kctl shows for ``ref``: ``<secret:env NAME>`` or ``<secret:file PATH>``."""
    return f"<secret:env {ref.env}>" if ref.env is not None else f"<secret:file {ref.file}>"


def shown_env(profile: Profile) -> dict[str, str]:
    """The server's environment as kctl shows it: clear values, and a reference in place
    of each secret's value."""
    env = profile.server.env_dict()
    env.update({name: describe(ref) for name, ref in profile.server.secrets})
    return dict(sorted(env.items()))


def resolve(ref: SecretRef, field: str) -> str:
    """The value ``ref`` names, read now. ``field`` (``server.secrets.HF_TOKEN``) is named
    in the error; the value never is. A file must be a regular file (not followed through
    a symlink) that no other user can read or write."""
    if ref.env is not None:
        value = os.environ.get(ref.env)
        if not value:
            raise SecretUnavailable(
                f"{field}: {describe(ref)}: the environment variable {ref.env} is not set",
                hint=f"export {ref.env} in the environment kctl runs in (never in the profile)",
            )
        return _checked(value, ref, field)
    assert ref.file is not None
    return _checked(_read_file(ref, field), ref, field)


def _read_file(ref: SecretRef, field: str) -> str:
    path = str(ref.file)
    where = f"{field}: {describe(ref)}"
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        reason = "a symlink (not followed)" if exc.errno == 40 else exc.strerror
        raise SecretUnavailable(
            f"{where}: cannot open the file: {reason}",
            hint="point the reference at the regular file that holds the secret",
        ) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise SecretUnavailable(
                f"{where}: not a regular file", hint="name the file that holds the secret"
            )
        if st.st_mode & 0o077 and st.st_uid == os.getuid():
            raise SecretUnavailable(
                f"{where}: other users can read or write it (mode {stat.S_IMODE(st.st_mode):o})",
                hint=f"chmod 600 {path}",
            )
        raw = os.read(fd, MAX_SECRET_BYTES + 1)
    finally:
        os.close(fd)
    if len(raw) > MAX_SECRET_BYTES:
        raise SecretUnavailable(
            f"{where}: larger than {MAX_SECRET_BYTES} bytes; a secret file holds the value only",
            hint="write the secret alone in the file",
        )
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise SecretUnavailable(f"{where}: not UTF-8 text", hint="save it as UTF-8") from None
    return text.rstrip("\r\n")


def _checked(value: str, ref: SecretRef, field: str) -> str:
    if not value:
        raise SecretUnavailable(
            f"{field}: {describe(ref)} is empty", hint="put the secret's value there"
        )
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in value):
        raise SecretUnavailable(
            f"{field}: {describe(ref)}: the value holds a control character (a line break?)",
            hint="a secret is one line of text; remove the extra lines",
        )
    return value


def resolve_env(secrets: tuple[tuple[str, SecretRef], ...]) -> dict[str, str]:
    """Each secret environment variable's value, read now."""
    return {name: resolve(ref, f"server.secrets.{name}") for name, ref in secrets}


def api_key(profile: Profile) -> str | None:
    """The server's API key, read now; None when the profile sets none."""
    ref = profile.server.api_key
    return None if ref is None else resolve(ref, "server.api_key")


def check_available(profile: Profile) -> None:
    """Raise :class:`~kctl.errors.SecretUnavailable` (exit 5) unless every secret the
    profile names can be read now: before a deploy changes anything."""
    resolve_env(profile.server.secrets)
    api_key(profile)


def scrub(text: str, values: Mapping[str, str] | list[str]) -> str:
    """``text`` with every one of ``values`` replaced by ``<secret>`` (a server's own log
    line that quoted one)."""
    items = values.values() if isinstance(values, Mapping) else values
    for value in sorted((v for v in items if v), key=len, reverse=True):
        text = text.replace(value, "<secret>")
    return text


#: addresses that listen on every interface
_ALL_INTERFACES = ("0.0.0.0", "::", "[::]", "")


def exposure_warnings(profile: Profile, *, bind: str | None = None, where: str = "") -> list[str]:
    """``kctl plan``'s warning when the server would listen on every interface with no
    API key: SGLang's endpoints (generation, and admin ones such as ``/flush_cache``)
    would answer anyone who reaches the host. ``bind``: a fleet file's address, which
    replaces ``server.host`` (``where``: that file)."""
    server = profile.server
    host = server.host if bind is None else bind
    if host not in _ALL_INTERFACES or server.api_key is not None:
        return []
    if bind is None:
        return [
            f"server.host: {host!r} listens on every interface and server.api_key is "
            "not set, so anyone who reaches this host can use the server (its admin endpoints "
            "included); fix: server.host: 127.0.0.1 behind a proxy, or set server.api_key "
            "(a secret reference)"
        ]
    return [
        f"{where or 'the fleet file'}: bind: {host!r}: every replica listens on every "
        f"interface of its node and {profile.source or 'the profile'} sets no server.api_key, "
        "so anyone who reaches a node can use its replica (admin endpoints included); "
        "fix: set server.api_key (a secret reference), or firewall the fleet's ports"
    ]
