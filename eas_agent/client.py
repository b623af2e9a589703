"""Talking to an agent (eas-agent): what EAS's search and calibration use (standard library only).

An agent that goes away is waited for: connection failures, a busy queue and a measurement cut
off by the agent's restart are retried with backoff for up to `wait` seconds, then reported as
AgentUnavailable with the last reason, never a hang. A refusal (wrong token, a model over the
agent's limits) is not retried.
"""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request
from urllib.parse import urlencode, urlsplit


class AgentError(Exception):
    """The agent cannot give this measurement; the message is one line."""


class AgentRefused(AgentError):
    pass


class AgentUnavailable(AgentError):
    pass


def check_url(url: str) -> str:
    """`url` without a trailing slash, or ValueError when it cannot name an agent."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 (raises ValueError for a port that is not a number)
    except ValueError:
        raise ValueError(f"agent URL {url[:80]!r} must look like http://host:port") from None
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.path not in ("", "/") or parts.query:
        raise ValueError(f"agent URL {url[:80]!r} must look like http://host:port")
    if parts.username or parts.password:  # a URL is stored with the study and shown: no secrets in it
        raise ValueError("put no credentials in the agent URL: the token comes from $EAS_AGENT_TOKEN")
    return url.rstrip("/")


def setting(name: str, default: str = "") -> str:
    """$EAS_AGENT_<name>, or its older spelling $EAS_DEVICE_<name>: set-ups made before the agent
    had its own name keep working."""
    return os.environ.get(f"EAS_AGENT_{name}", os.environ.get(f"EAS_DEVICE_{name}", default))


def token() -> str:
    return setting("TOKEN").strip()


def _request(url: str, path: str, body: bytes | None, timeout: float) -> dict:
    request = urllib.request.Request(url + path, data=body, method="POST" if body is not None else "GET",
                                     headers={"Authorization": f"Bearer {token()}",
                                              "Content-Type": "application/octet-stream"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            return json.loads(answer.read())
    except urllib.error.HTTPError as error:
        try:
            reason = json.loads(error.read()).get("error", error.reason)
        except (ValueError, AttributeError, OSError):
            reason = error.reason
        if error.code == 401:
            raise AgentRefused(f"the agent at {url} refused the token: set EAS_AGENT_TOKEN to the agent's token") \
                from None
        if error.code >= 500:
            raise AgentUnavailable(f"the agent at {url}: {reason}") from None
        raise AgentRefused(f"the agent at {url} refused the model: {reason}") from None
    except (urllib.error.URLError, OSError, ValueError) as error:  # refused, reset, timed out, cut short
        reason = getattr(error, "reason", error)
        raise AgentUnavailable(f"the agent at {url} unreachable: {reason}") from None


def _retrying(url: str, path: str, body: bytes | None, timeout: float, wait: float, sleep=time.sleep) -> dict:
    give_up, pause = time.monotonic() + wait, 1.0
    while True:
        try:
            return _request(url, path, body, timeout)
        except AgentUnavailable as error:
            if time.monotonic() + pause > give_up:
                raise AgentUnavailable(f"{error} (waited {wait:.0f} s)") from None
            sleep(pause)
            pause = min(2 * pause, 15.0)


def info(url: str, wait: float = 0.0, timeout: float = 10.0) -> dict:
    """What the agent at `url` is: runtime, provider, device, limits."""
    return _retrying(check_url(url), "/info", None, timeout, wait)


def measure(url: str, onnx: bytes, threads: int, batch: int, wait: float = 300.0, timeout: float = 120.0) -> dict:
    """The agent's measurement of `onnx`: single and batched latency, energy, provenance."""
    query = urlencode({"threads": threads, "batch": batch})
    return _retrying(check_url(url), f"/measure?{query}", onnx, timeout, wait)
