"""Who may take a seat in the classroom (``decode-tui serve``): the checks a request passes before it gets the page
or a session, and the console lines that say what was refused.

A request is refused, in this order, for a Host header that is no host name (or, where no token is asked, not
this machine's: DNS rebinding), a missing or wrong access token, a websocket opened by another site's page, a full
class (or a server that is stopping), and a network address that already has ``max_per_address`` tabs open. Each
refusal is one line on the teacher's console, rate-limited by kind (:class:`Refusals`).

It knows aiohttp's requests and answers, and how many seats are taken from where; nothing about what a session
runs (cli/processes.py) or how a session goes (cli/classroom.py).
"""

from __future__ import annotations

import re
import secrets
import time
from collections.abc import Callable, Collection
from urllib.parse import urlsplit

from aiohttp import web

# A Host header the page may copy into the websocket's address: a name or an IPv4 address, or an IPv6 one in
# brackets, then perhaps a port.
HOST = re.compile(r"([A-Za-z0-9.-]+|\[[0-9A-Fa-f:.]+\])(:[0-9]{1,5})?")
LOCAL_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})


class Refusals:
    """What the server refused or cut off, for the teacher's console: a line for each kind at most every
    EVERY_S seconds, the rest counted into the next, so a flood of bad requests cannot flood the console."""

    EVERY_S = 10.0

    def __init__(self, say: Callable[[str], None]) -> None:
        self.say = say
        self.last: dict[str, float] = {}  # kind -> when it was last said
        self.held: dict[str, int] = {}  # kind -> how many since, unsaid

    def __call__(self, kind: str, line: str) -> None:
        now = time.monotonic()
        if now - self.last.get(kind, -self.EVERY_S) < self.EVERY_S:
            self.held[kind] = self.held.get(kind, 0) + 1
            return
        held = self.held.pop(kind, 0)
        self.last[kind] = now
        self.say(line + (f" (and {held} more like it since the last such line)" if held else ""))


class Door:
    """The classroom's checks, for the page (:meth:`page_refused`) and for a session's websocket
    (:meth:`seat_refused`). ``taken`` is the network address of every seat taken, ``closing`` whether the server
    is stopping: the classroom's own state, asked at each request."""

    def __init__(self, token: str | None, max_sessions: int, max_per_address: int,
                 refused: Refusals) -> None:
        self.token = token  # None: no token asked (on localhost)
        self.max_sessions = max_sessions
        self.max_per_address = max_per_address
        self.refused = refused

    def allowed(self, given: str | None) -> bool:
        return self.token is None or (given is not None and secrets.compare_digest(given, self.token))

    def host_refused(self, request: web.Request) -> str | None:
        """Why the request's Host header is refused, or None: the page copies it into the websocket's address, so
        it must be a host name or address and a port, nothing else; and where no token is asked (this machine
        alone), a name for this machine, so that a page from another site whose name was pointed at 127.0.0.1 is
        not served (DNS rebinding)."""
        host = request.host
        if not HOST.fullmatch(host):
            return "a Host header that is no host name"
        name = host.rsplit(":", 1)[0] if not host.endswith("]") else host
        if self.token is None and name.strip("[]").lower() not in LOCAL_NAMES:
            return f"Host {host}, not this machine's name, where no token is asked"
        return None

    @staticmethod
    def origin_refused(request: web.Request) -> str | None:
        """Why the websocket's Origin is refused, or None: a browser says which page opens a websocket, and only
        this server's own page may (another site's script could otherwise take a seat with the token in its
        address). A client that names no page (no Origin) is not a browser page and is let in."""
        origin = request.headers.get("Origin")
        if origin is None:
            return None
        if urlsplit(origin).netloc.lower() != request.host.lower():
            return f"a page from {origin[:80]!r}, not this server's"
        return None

    def refuse(self, request: web.Request, status: int, kind: str, why: str) -> None:
        self.refused(kind, f"refused {request.remote or 'a client'} ({status}): {why}")

    def page_refused(self, request: web.Request, taken: Collection[str], closing: bool) -> web.Response | None:
        """The answer that refuses the page (and says why on the console), or None: it may be served."""
        if (bad_host := self.host_refused(request)) is not None:
            self.refuse(request, 400, "host", bad_host)
            return web.Response(status=400, text="This page is served under this machine's address only.\n")
        if not self.allowed(request.query.get("token")):
            self.refuse(request, 403, "token", "no access token")
            return web.Response(status=403, text="This classroom needs its access token: open the whole address "
                                "the teacher's console shows (it ends in ?token=...).\n")
        if len(taken) >= self.max_sessions or closing:
            self.refuse(request, 503, "full", f"the class is full ({len(taken)} tabs)")
            return web.Response(status=503, content_type="text/html", text=full_page(self.max_sessions))
        return None

    def seat_refused(self, request: web.Request, taken: Collection[str], closing: bool) -> web.HTTPException | None:
        """The answer that refuses a websocket a seat (and says why on the console), or None: it may open one."""
        checks = (
            (self.host_refused(request), 400, "host", web.HTTPBadRequest),
            (None if self.allowed(None if self.token is None else request.match_info["key"]) else
             "no access token", 403, "token", web.HTTPForbidden),
            (self.origin_refused(request), 403, "origin", web.HTTPForbidden),
            ("the class is full" if len(taken) >= self.max_sessions or closing else None, 503, "full",
             web.HTTPServiceUnavailable),
            (f"{self.max_per_address} tabs are open from its address already"
             if sum(address == (request.remote or "") for address in taken) >= self.max_per_address else None,
             429, "address", web.HTTPTooManyRequests),
        )
        for why, status, kind, answer in checks:
            if why is not None:
                self.refuse(request, status, kind, why)
                if status == 503:
                    return answer(text=full_page(self.max_sessions), content_type="text/html")
                if status == 429:
                    return answer(text=f"At most {self.max_per_address} tabs from one address: close one first.\n")
                return answer(text=f"Refused: {why}.\n")
        return None


def full_page(seats: int) -> str:
    return ("<!DOCTYPE html><html><head><meta charset='utf-8'><title>decode-tui: the class is full</title></head>"
            "<body style='background:#0c181f;color:#eee;font-family:monospace;padding:3em'>"
            f"<h1>The class is full</h1><p>All {seats} places on this server are taken. Try again in a minute "
            "(reload this page), or ask your teacher.</p></body></html>")
