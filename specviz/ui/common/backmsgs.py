"""What a participant's client may send a shared server: an allowlist of Streamlit's BackMsgs, and uploads only under
file ids the server minted for that session, within caps checked before the body is read or kept.

Any websocket client can send any BackMsg, whatever the page shows: ``clear_cache`` (the whole process's caches),
``load_git_info`` (git commands on the event loop), ``set_run_on_save``, a ``backend_operation_request`` that installs
Streamlit's "skills" into the app's folder, and ``file_urls_request``, which mints one upload URL per name it lists, on
the event loop, without a limit (a 2 MB frame of a million names held a replica for 14 s and grew it by ~1 GB). For a
session not in local mode (or whose mode cannot be told) only ALLOWED kinds pass, the rest are dropped and logged once
per session and kind; a ``file_urls_request`` passes with at most MAX_NAMES names (every uploader in specviz takes one
file) and URL_REQUESTS_PER_MIN per session; an upload is refused (4xx) unless its file id was minted for that session,
its Content-Length fits that session's uploader (expect_upload), and the session's and the process's stored files
stay within UPLOAD_CAPS. The owner in local mode keeps Streamlit's behaviour. For every client, a websocket frame
over server.maxWidgetStateSize (1 MB: .streamlit/config.toml) is refused as it arrives, not read whole first.

install() runs once per process. Run as a room's replica, the container or ``python -m specviz app`` (WARM_START in
specviz.workshop.replicas.supervisor) it runs before the server starts; a plain ``streamlit run app.py`` runs no code of
ours before a session's first script run, so there the guard starts then (specviz.ui.common.sessions; the log warns),
and the upload route's early Content-Length check and the frame cap at arrival are missing (the check before storing
and Streamlit's own frame check still hold). These are Streamlit internals (AppSession.handle_backmsg, the BackMsg
oneofs, MemoryUploadedFileManager, the Starlette upload route and uvicorn settings), so ``available()`` checks they
are there; where they are not, nothing is installed and a warning says so.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from streamlit.logger import get_logger

from specviz.ui.common import st_internals
from specviz.workshop.resources import singleton

log = get_logger(__name__)  # streamlit's handler: the server's log shows what was dropped

ALLOWED = frozenset({"rerun_script", "stop_script", "app_heartbeat", "file_urls_request", "backend_operation_request"})
ALLOWED_OPERATIONS = frozenset({"deferred_file", "dataframe_chunk"})  # a download's bytes, a big table's rows: the session's own data
MAX_NAMES = 1  # names in one file_urls_request: what one of specviz's single-file uploaders asks for
URL_REQUESTS_PER_MIN = 20  # file_urls_requests per session per minute (a participant picks a file now and then)
MULTIPART_SLACK_BYTES = 64 * 1024  # a PUT's multipart framing around the file: boundary, headers, file name


@dataclass(frozen=True)
class UploadCaps:
    """What the uploads of shared sessions may keep in memory until their session ends."""

    session_files: int = 4  # files one session keeps (each uploader replaces its own file)
    session_bytes: int = 64 * 2**20  # one recording (50 MB) and a race file, with room to spare
    minted: int = 32  # upload URLs one session may hold unused
    process_files: int = 200
    process_bytes: int = 512 * 2**20


UPLOAD_CAPS = UploadCaps()


def available() -> bool:
    """Streamlit's AppSession dispatches BackMsgs in handle_backmsg, the BackMsg oneofs name the kinds we know, and the
    uploaded files live in a MemoryUploadedFileManager that mints their URLs."""
    try:
        BackMsg, AppSession = st_internals.back_msg(), st_internals.app_session()
        MemoryUploadedFileManager = st_internals.uploaded_file_manager()
        kinds = {f.name for f in BackMsg.DESCRIPTOR.oneofs_by_name["type"].fields}
        operation = BackMsg.DESCRIPTOR.fields_by_name["backend_operation_request"].message_type
        payloads = {f.name for f in operation.oneofs_by_name["payload"].fields}
        names = BackMsg.DESCRIPTOR.fields_by_name["file_urls_request"].message_type.fields_by_name["file_names"]
        manager = all(callable(getattr(MemoryUploadedFileManager, m, None)) for m in ("add_file", "get_upload_urls", "remove_session_files"))
        return callable(getattr(AppSession, "handle_backmsg", None)) and ALLOWED <= kinds and ALLOWED_OPERATIONS <= payloads and names is not None and manager
    except Exception:  # an import, attribute or oneof missing in another Streamlit version
        return False


class Doors:
    """The per-session bookkeeping of the guard (thread-safe: the event loop and script threads both call it)."""

    def __init__(self, is_local: Callable[[str], bool], caps: UploadCaps = UPLOAD_CAPS, clock: Callable[[], float] = time.monotonic) -> None:
        self.is_local, self.caps, self.clock = is_local, caps, clock
        self._lock = threading.Lock()
        self.storing = threading.Lock()  # held while an upload is checked and stored
        self._logged: set[tuple[str, str]] = set()
        self._requests: dict[str, list[float]] = {}  # session -> times of its recent file_urls_requests
        self._minted: dict[str, dict[str, int]] = {}  # session -> file id -> the most bytes that file may have
        self._expect: dict[str, int] = {}  # session -> the cap of the uploader its page drew last

    def shared(self, session_id: str) -> bool:
        """Whether this session gets the guard: not in local mode, or its mode cannot be told."""
        try:
            return self.is_local(session_id) is not True
        except Exception:
            log.exception("could not tell the mode of session %s: it is guarded", session_id[:8])
            return True

    def refuse_once(self, session_id: str, what: str, detail: str = "") -> None:
        with self._lock:
            first = (session_id, what) not in self._logged
            self._logged.add((session_id, what))
        if first:
            log.warning("refused %s from session %s (shared mode; logged once per session)%s", what, session_id[:8], detail)

    def allow(self, msg, session_id: str) -> bool:
        """Whether this BackMsg from this session reaches Streamlit."""
        kind = msg.WhichOneof("type")
        if kind not in ALLOWED:
            if not self.shared(session_id):
                return True
            self.refuse_once(session_id, f"a {kind} message")
            return False
        if kind == "backend_operation_request":
            payload = msg.backend_operation_request.WhichOneof("payload")
            if payload in ALLOWED_OPERATIONS or not self.shared(session_id):
                return True
            self.refuse_once(session_id, f"a backend_operation_request {payload}")
            return False
        if kind == "file_urls_request" and self.shared(session_id):
            names = len(msg.file_urls_request.file_names)
            if names > MAX_NAMES:
                self.refuse_once(session_id, "a file_urls_request", f": {names:,} names, at most {MAX_NAMES}")
                return False
            if not self._take_request(session_id):
                self.refuse_once(session_id, "file_urls_requests", f": more than {URL_REQUESTS_PER_MIN} a minute")
                return False
        return True

    def _take_request(self, session_id: str) -> bool:
        now = self.clock()
        with self._lock:
            recent = [t for t in self._requests.get(session_id, []) if now - t < 60.0]
            if len(recent) >= URL_REQUESTS_PER_MIN:
                self._requests[session_id] = recent
                return False
            self._requests[session_id] = [*recent, now]
            return True

    # --- uploads -----------------------------------------------------------------------------------------------

    def expect(self, session_id: str, max_bytes: int) -> None:
        """The uploader this session's page drew takes at most max_bytes: the URLs minted from now on carry that cap."""
        with self._lock:
            self._expect[session_id] = max_bytes

    def mint(self, session_id: str, file_ids: list[str], default_cap: int) -> bool:
        """Note the file ids minted for this session; False (mint none) where it would hold more than caps.minted."""
        shared = self.shared(session_id)
        with self._lock:
            minted = self._minted.setdefault(session_id, {})
            refuse = shared and len(minted) + len(file_ids) > self.caps.minted
            if not refuse:
                cap = min(self._expect.get(session_id, default_cap), default_cap)
                minted.update((f, cap) for f in file_ids)
        if refuse:
            self.refuse_once(session_id, "more upload URLs", f": it holds {self.caps.minted} unused")
        return not refuse

    def check_upload(self, session_id: str, file_id: str, size: int | None, stored: dict[str, dict[str, int]]) -> str | None:
        """Why this upload is refused (None: it may be stored). size: the body's length (None: not told); stored:
        session -> file id -> bytes of the files the process keeps now."""
        if not self.shared(session_id):
            return None
        with self._lock:
            cap = self._minted.get(session_id, {}).get(file_id)
        if cap is None:
            return "a file id this server did not issue to this session"
        if size is None:
            return "an upload without a Content-Length"
        if size > cap:
            return f"a file of {size:,} bytes; this upload takes at most {cap:,}"
        mine = {f: b for f, b in stored.get(session_id, {}).items() if f != file_id}  # a file sent again replaces itself
        if len(mine) + 1 > self.caps.session_files or sum(mine.values()) + size > self.caps.session_bytes:
            return f"more uploads than one session keeps ({self.caps.session_files} files, {self.caps.session_bytes // 2**20} MB)"
        others = [b for s, files in stored.items() for f, b in files.items() if (s, f) != (session_id, file_id)]
        if len(others) + 1 > self.caps.process_files or sum(others) + size > self.caps.process_bytes:
            return f"more uploads than this server keeps ({self.caps.process_files} files, {self.caps.process_bytes // 2**20} MB)"
        return None

    def forget(self, session_id: str) -> None:
        """The session ended (Streamlit dropped its files): its ids, counts and log marks go too."""
        with self._lock:
            self._minted.pop(session_id, None)
            self._requests.pop(session_id, None)
            self._expect.pop(session_id, None)
            self._logged = {k for k in self._logged if k[0] != session_id}


def doors() -> Doors | None:
    """This process's guard (None before install)."""
    return singleton("client-doors-holder", dict).get("doors")


def install(is_local: Callable[[str], bool]) -> bool:
    """Once per process: guard every session for which is_local(session_id) is not True (an error there guards too).
    False where Streamlit's internals differ (nothing installed)."""
    return singleton("client-doors", lambda: _install(is_local))


def expect_upload(max_bytes: int) -> None:
    """Call beside st.file_uploader: this session's next upload URLs take at most max_bytes (checked before the
    body is read where the guard started with the server, before it is stored always)."""
    guard, ctx = doors(), st_internals.script_run_ctx()
    if guard is not None and ctx is not None:
        guard.expect(ctx.session_id, max_bytes)


def _install(is_local: Callable[[str], bool]) -> bool:
    if not available():
        log.warning("this Streamlit's BackMsgs or upload manager are not as specviz knows them: participants' messages and uploads are not filtered")
        return False
    if st_internals.runtime_started():  # a plain `streamlit run`: the server ran before this, its sessions' first messages unfiltered
        log.warning("the guard on participants' messages starts now, at the first script run, not with the server: open it to a room with `python -m specviz app` (docs/workshop.md)")
    guard = Doors(is_local)
    singleton("client-doors-holder", dict)["doors"] = guard
    _guard_messages(guard)
    _guard_uploads(guard)
    _guard_upload_route(guard)
    _cap_inbound_frames()
    return True


def _guard_messages(guard: Doors) -> None:
    AppSession = st_internals.app_session()
    handle = AppSession.handle_backmsg

    def handle_backmsg(self, msg) -> None:
        if guard.allow(msg, self.id):
            handle(self, msg)

    handle_backmsg.__wrapped__ = handle  # type: ignore[attr-defined]
    AppSession.handle_backmsg = handle_backmsg


def _max_upload_bytes() -> int:
    from streamlit import config

    return int(config.get_option("server.maxUploadSize")) * 2**20


def _stored(manager) -> dict[str, dict[str, int]]:
    return {s: {f: len(rec.data) for f, rec in files.items()} for s, files in list(manager.file_storage.items())}


def _guard_uploads(guard: Doors) -> None:
    MemoryUploadedFileManager = st_internals.uploaded_file_manager()
    mint, add, remove_session = MemoryUploadedFileManager.get_upload_urls, MemoryUploadedFileManager.add_file, MemoryUploadedFileManager.remove_session_files

    def get_upload_urls(self, session_id, file_names):
        if guard.shared(session_id) and len(file_names) > MAX_NAMES:  # the message guard drops these first
            return []
        infos = mint(self, session_id, file_names)
        return infos if guard.mint(session_id, [i.file_id for i in infos], _max_upload_bytes()) else []

    def add_file(self, session_id, file) -> None:
        with guard.storing:  # the check and the store as one: two uploads at once cannot both take the last room
            with self._lock:
                stored = _stored(self)
            why = guard.check_upload(session_id, file.file_id, len(file.data), stored)
            if why is not None:
                guard.refuse_once(session_id, "an upload", f": {why}")
                raise _refusal(why)
            add(self, session_id, file)

    def remove_session_files(self, session_id) -> None:
        remove_session(self, session_id)
        guard.forget(session_id)

    for name, fn in (("get_upload_urls", get_upload_urls), ("add_file", add_file), ("remove_session_files", remove_session_files)):
        fn.__wrapped__ = getattr(MemoryUploadedFileManager, name)  # type: ignore[attr-defined]
        setattr(MemoryUploadedFileManager, name, fn)


def _refusal(why: str) -> Exception:
    """What the upload route answers: 413 for sizes and counts, 403 for an id not issued (a plain error elsewhere)."""
    try:
        from starlette.exceptions import HTTPException
    except ImportError:
        return ValueError(why)
    return HTTPException(status_code=403 if "did not issue" in why else 413, detail=f"Refused: {why}.")


def _guard_upload_route(guard: Doors) -> bool:
    """Before the server builds its routes: the upload PUT checks id, Content-Length and caps before reading the body.
    False (nothing changed) where the route factory is not there or the server already built its routes."""
    try:
        from starlette.requests import Request
        from starlette.routing import Route
        starlette_app = st_internals.starlette_app_module()
    except ImportError:
        return False
    create = getattr(starlette_app, "create_upload_routes", None)
    if create is None:
        return False

    def create_upload_routes(runtime, upload_mgr, base_url):
        routes = create(runtime, upload_mgr, base_url)
        return [_checked_put(r, guard, upload_mgr) if "PUT" in (getattr(r, "methods", None) or ()) else r for r in routes]

    def _checked_put(route: Route, guard: Doors, upload_mgr) -> Route:
        endpoint = route.endpoint

        async def put(request: Request):
            length = request.headers.get("content-length")
            size = max(0, int(length) - MULTIPART_SLACK_BYTES) if length and length.isdigit() else None
            session_id, file_id = request.path_params["session_id"], request.path_params["file_id"]
            with upload_mgr._lock:
                stored = _stored(upload_mgr)
            why = guard.check_upload(session_id, file_id, size, stored)
            if why is not None:
                guard.refuse_once(session_id, "an upload", f": {why}")
                raise _refusal(why)
            return await endpoint(request)

        return Route(route.path, put, methods=["PUT"], name=route.name)

    create_upload_routes.__wrapped__ = create  # type: ignore[attr-defined]
    starlette_app.create_upload_routes = create_upload_routes
    return True


def _cap_inbound_frames() -> bool:
    """Before the server starts: the websocket layer refuses a client's frame over server.maxWidgetStateSize as it
    arrives. Streamlit gives uvicorn server.maxMessageSize (200 MB, its cap on what the server sends) as the inbound
    limit too, so a frame up to 200 MB was read into memory before Streamlit closed the connection for its size. For
    every client (no frame over the limit was ever handled). False where the server's settings are not as known."""
    try:
        read_limit = st_internals.max_widget_state_size_reader()
        starlette_server = st_internals.starlette_server_module()
    except ImportError:
        return False
    kwargs = getattr(starlette_server, "_get_uvicorn_config_kwargs", None)
    if kwargs is None:
        return False

    def capped() -> dict:
        out = kwargs()
        if "ws_max_size" in out:
            out["ws_max_size"] = min(out["ws_max_size"], read_limit())
        return out

    capped.__wrapped__ = kwargs  # type: ignore[attr-defined]
    starlette_server._get_uvicorn_config_kwargs = capped
    return True
