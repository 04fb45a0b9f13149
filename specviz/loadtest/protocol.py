"""A Streamlit client without a browser: it speaks the app's own websocket protocol (/_stcore/stream) with the
protobuf classes Streamlit ships, so a load test measures the server, not headless browsers.

The flow, as Streamlit's frontend does it: GET the page (cookies: a balancer's sticky cookie, the XSRF cookie), open
the websocket with subprotocol "streamlit" and those cookies, send a BackMsg rerun_script (query string, widget
states, and for a widget inside a fragment that fragment's id), receive ForwardMsgs (new_session, deltas with their
paths, script_finished) until the run is finished. Widget ids come from the deltas; a click sends the button's
trigger_value with every widget value this client has set.

    with StSession("http://127.0.0.1:8501", {"drafter": "ngram", "seed": "3"}) as s:
        s.click("Step")                       # by label or key; waits for the run (a fragment run here)
        print(s.metric("rounds"), s.token_stream())

Cookies are kept per session (one jar each), so a balancer's stickiness holds (set_cookie pins a session to a
replica before it opens). `page` names a page of a multipage app by its URL path ("exactness"), `headers` are sent
with the page's GET and the websocket's upgrade request (a proxy's X-Forwarded-For). A few messages a browser's
developer menu sends are here too (clear_cache), so a test can send what any client can: connect() opens a session
without running the script, send() sends any BackMsg, upload_urls() asks for upload URLs as an uploader does and
upload() PUTs a file (or only claims a Content-Length). One session per thread.
"""

from __future__ import annotations

import http.cookiejar
import socket
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from html.parser import HTMLParser

from streamlit.proto.BackMsg_pb2 import BackMsg
from streamlit.proto.ForwardMsg_pb2 import ForwardMsg
from streamlit.proto.WidgetStates_pb2 import WidgetState

FINISHED = ForwardMsg.ScriptFinishedStatus
DONE = {FINISHED.FINISHED_SUCCESSFULLY, FINISHED.FINISHED_FRAGMENT_RUN_SUCCESSFULLY, FINISHED.FINISHED_WITH_COMPILE_ERROR}
SIDEBAR = 1  # delta_path[0]: 0 main, 1 sidebar, 2 event, 3 bottom
WIDGETS = ("button", "text_area", "text_input", "number_input", "slider", "selectbox", "checkbox", "toggle", "radio", "select_slider")


class ProtocolError(RuntimeError):
    pass


@dataclass
class Node:
    """One element (or block) the server drew at a delta path."""

    path: tuple[int, ...]
    kind: str  # the Element oneof ("button", "html", "metric", ...) or "block"
    proto: object
    fragment_id: str


@dataclass
class RunResult:
    """What one rerun sent back."""

    status: int  # ForwardMsg.ScriptFinishedStatus
    seconds: float  # from sending the request to script_finished (client side)
    paths: list[tuple[int, ...]] = field(default_factory=list)  # every delta path written, in order
    fragment: bool = False

    @property
    def touched_sidebar(self) -> bool:
        return any(p and p[0] == SIDEBAR for p in self.paths)


def widget_key(widget_id: str) -> str | None:
    """The user key of a widget id ("$$ID-<hash>-step" -> "step"); None for widgets without a key."""
    parts = widget_id.split("-", 2)
    return parts[2] if len(parts) == 3 and parts[2] != "None" else None


class _Text(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.spans: list[tuple[str, str]] = []
        self._style: list[str] = []

    def handle_starttag(self, tag, attrs):
        self._style.append(dict(attrs).get("style", "") if tag == "span" else "")

    def handle_endtag(self, tag):
        if self._style:
            self._style.pop()

    def handle_data(self, data):
        self.spans.append((data, self._style[-1] if self._style else ""))


class StSession:
    """One browser-less session of a Streamlit app."""

    def __init__(self, url: str, query: dict[str, str] | str | None = None, timeout_s: float = 300.0, headers: dict[str, str] | None = None, source: str | None = None, page: str = "") -> None:
        """headers: sent with the page's GET and the websocket's upgrade (a proxy's, say); a Host here is sent instead of
        the URL's, with a matching Origin unless headers name one (a page at a DNS-rebinding name). source: the local address the
        websocket connects from (e.g. 127.0.0.7: on Linux every 127.x.y.z is this machine), so one test machine can be
        several clients to a server that counts per client address. page: a page's URL path ("exactness"); "" is the
        app's default page."""
        self.base = url.rstrip("/")
        self.headers = dict(headers or {})
        self.source = source
        self.page = page
        self.query = query if isinstance(query, str) else urllib.parse.urlencode(query or {})
        self.timeout_s = timeout_s
        self.cookies = http.cookiejar.CookieJar()
        self.nodes: dict[tuple[int, ...], Node] = {}
        self.values: dict[str, WidgetState] = {}  # widget id -> the value this client set (sent with every rerun)
        self.session_id: str | None = None
        self.auto_reruns: dict[str, float] = {}  # fragment id -> seconds: the run_every fragments of the latest full run
        self.page_script_hash = ""
        self._ws = None

    # --- connection --------------------------------------------------------------------------------------------

    def open(self) -> RunResult:
        """GET the page (cookies), connect, run the script once; returns that first run."""
        self.connect()
        return self.rerun()

    def connect(self) -> None:
        """GET the page (cookies) and open the websocket, running no script: the server has a session for this
        client, which has sent nothing yet (send() and upload_urls() can speak first, as a raw client may)."""
        from websockets.sync.client import connect

        opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(self.cookies))
        page = f"{self.base}/{self.page}"
        request = urllib.request.Request(f"{page}?{self.query}" if self.query else page, headers=self.headers)
        with opener.open(request, timeout=self.timeout_s) as resp:
            resp.read()
        with opener.open(urllib.request.Request(f"{self.base}/_stcore/health", headers=self.headers), timeout=self.timeout_s) as resp:
            resp.read()  # as the frontend does first: Streamlit sets its XSRF cookie here (uploads send it back)
        parsed = urllib.parse.urlparse(self.base)
        scheme = "wss" if parsed.scheme == "https" else "ws"
        host = next((v for k, v in self.headers.items() if k.lower() == "host"), None)
        headers = {"Origin": f"{parsed.scheme}://{host or parsed.netloc}", **{k: v for k, v in self.headers.items() if k.lower() != "host"}}
        cookie = self._cookie_header()
        if cookie:
            headers["Cookie"] = cookie
        source = {"source_address": (self.source, 0)} if self.source else {}
        if host:  # the URI names the Host; the socket goes to the URL's address
            source = {"sock": socket.create_connection((parsed.hostname, parsed.port or 80), timeout=self.timeout_s, source_address=(self.source, 0) if self.source else None)}
        self._ws = connect(f"{scheme}://{host or parsed.netloc}{parsed.path}/_stcore/stream", subprotocols=["streamlit"], additional_headers=headers,
                           open_timeout=self.timeout_s, max_size=None, ping_interval=20, ping_timeout=None, **source)  # fmt: skip
        self._keep_cookies(self._ws.response.headers.get_all("Set-Cookie"))

    def close(self) -> None:
        if self._ws is not None:
            try:
                self._ws.close()
            finally:
                self._ws = None

    def __enter__(self) -> StSession:
        self.open()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _cookie_header(self) -> str:
        return "; ".join(f"{c.name}={c.value}" for c in self.cookies)

    def _keep_cookies(self, set_cookies: list[str]) -> None:
        """Cookies set on the websocket handshake (a balancer may set its sticky cookie there) join the jar."""
        for header in set_cookies:
            name, _, rest = header.partition("=")
            self.set_cookie(name.strip(), rest.split(";", 1)[0])

    def set_cookie(self, name: str, value: str) -> None:
        """Put a cookie in this session's jar (sent from the next open on): e.g. a balancer's sticky cookie, which
        sends the session to the replica it names."""
        host = urllib.parse.urlparse(self.base).hostname or ""
        self.cookies.set_cookie(http.cookiejar.Cookie(0, name, value, None, False, host, False, False, "/", True, False, None, True, None, None, {}))

    # --- reruns ------------------------------------------------------------------------------------------------

    def rerun(self, trigger: WidgetState | None = None, fragment_id: str = "") -> RunResult:
        """Send rerun_script (every value set so far, plus the trigger) and read until the run is finished."""
        msg = BackMsg()
        state = msg.rerun_script
        state.query_string = self.query
        state.page_script_hash = self.page_script_hash
        state.page_name = self.page
        if fragment_id:
            state.fragment_id = fragment_id
        states = dict(self.values)
        if trigger is not None:
            states[trigger.id] = trigger
        for value in states.values():
            state.widget_states.widgets.add().CopyFrom(value)
        start = time.perf_counter()
        self._ws.send(msg.SerializeToString())
        return self._read_run(start, bool(fragment_id))

    def clear_cache(self) -> None:
        """Send the BackMsg of Streamlit's developer menu *Clear cache*, as any client can (whatever the toolbar
        hides): Streamlit clears st.cache_data and st.cache_resource for the whole process, and this session's state.
        Nothing comes back; the server handles a session's messages in order, so the next rerun runs after it."""
        msg = BackMsg()
        msg.clear_cache = True
        self._ws.send(msg.SerializeToString())

    def send(self, msg: BackMsg | bytes) -> None:
        """Send any BackMsg (or any bytes) as one websocket frame, as any client can; nothing is read."""
        self._ws.send(msg if isinstance(msg, bytes) else msg.SerializeToString())

    def upload_urls(self, names: list[str], timeout_s: float = 10.0) -> list[tuple[str, str]] | None:
        """Ask for upload URLs as an uploader does (file_urls_request); (file id, upload path) per URL the server
        minted, or None when no answer came within timeout_s (the request was dropped). Other messages are skipped."""
        import secrets

        msg = BackMsg()
        msg.file_urls_request.request_id = request_id = secrets.token_hex(8)
        msg.file_urls_request.session_id = self.session_id or ""
        msg.file_urls_request.file_names.extend(names)
        self.send(msg)
        deadline = time.perf_counter() + timeout_s
        while True:
            try:
                raw = self._ws.recv(timeout=max(0.0, deadline - time.perf_counter()))
            except TimeoutError:
                return None
            reply = ForwardMsg()
            reply.ParseFromString(raw)
            if reply.WhichOneof("type") == "new_session":
                self.session_id = reply.new_session.initialize.session_id or self.session_id
            if reply.WhichOneof("type") == "file_urls_response" and reply.file_urls_response.response_id == request_id:
                return [(u.file_id, u.upload_url) for u in reply.file_urls_response.file_urls]

    def upload(self, path: str, data: bytes, *, declared: int | None = None, name: str = "file.json", timeout_s: float = 30.0) -> int:
        """PUT one file to an upload path (/_stcore/upload_file/<session>/<file id>) as the uploader does (multipart,
        this client's XSRF cookie as the token); returns the HTTP status. declared: a Content-Length to claim instead
        of the body's; then only the headers are sent and the reply read (a server that waits for the body times out:
        -1)."""
        import http.client

        boundary = "specvizboundary7MA4YWxk"
        body = (f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="{name}"\r\nContent-Type: application/json\r\n\r\n').encode() + data + f"\r\n--{boundary}--\r\n".encode()
        parsed = urllib.parse.urlparse(self.base)
        token = next((c.value for c in self.cookies if c.name == "_streamlit_xsrf"), "")
        headers = {**self.headers, "Content-Type": f"multipart/form-data; boundary={boundary}", "Content-Length": str(declared if declared is not None else len(body)),
                   "X-Xsrftoken": token, "Cookie": self._cookie_header(), "Origin": f"{parsed.scheme}://{parsed.netloc}"}  # fmt: skip
        conn = http.client.HTTPConnection(parsed.hostname, parsed.port, timeout=timeout_s)
        try:
            conn.putrequest("PUT", f"{parsed.path}{path}", skip_accept_encoding=True)
            for k, v in headers.items():
                conn.putheader(k, v)
            conn.endheaders(None if declared is not None else body)
            return conn.getresponse().status
        except TimeoutError:
            return -1
        finally:
            conn.close()

    def wait_for_run(self, timeout_s: float) -> RunResult | None:
        """A run the server started on its own (a browser just listens: the app's watcher reruns a follower's page),
        read to its end; None when nothing arrived within timeout_s."""
        deadline = time.perf_counter() + timeout_s
        while True:
            try:
                first = self._ws.recv(timeout=max(0.0, deadline - time.perf_counter()))
            except TimeoutError:
                return None
            msg = ForwardMsg()
            msg.ParseFromString(first)
            if msg.WhichOneof("type") == "new_session":  # a run starts; anything else (a status message) is skipped
                return self._read_run(time.perf_counter(), False, first)

    def _read_run(self, start: float, fragment: bool, first: bytes | None = None) -> RunResult:
        written: set[tuple[int, ...]] = set()
        result = RunResult(status=-1, seconds=0.0, fragment=fragment)
        timed: dict[str, float] = {}
        deadline = start + self.timeout_s
        while True:
            remaining = deadline - time.perf_counter()
            if remaining <= 0:
                raise ProtocolError(f"no script_finished within {self.timeout_s:.0f} s")
            msg = ForwardMsg()
            msg.ParseFromString(first if first is not None else self._ws.recv(timeout=remaining))
            first = None
            kind = msg.WhichOneof("type")
            if kind == "new_session":
                self.session_id = msg.new_session.initialize.session_id or self.session_id
                timed = {}  # what this run registers (a fragment run registers nothing: its timers stay)
                written.clear()
            elif kind == "auto_rerun":  # a fragment with run_every: a browser reruns it on that timer
                timed[msg.auto_rerun.fragment_id] = msg.auto_rerun.interval
            elif kind == "delta":
                path = tuple(msg.metadata.delta_path)
                self._apply_delta(path, msg.delta)
                written.add(path)
                result.paths.append(path)
            elif kind == "page_info_changed":
                self.query = msg.page_info_changed.query_string
            elif kind == "script_finished":
                status = msg.script_finished
                if status == FINISHED.FINISHED_EARLY_FOR_RERUN:
                    continue  # the script asked for a rerun; it follows on its own
                fragment = fragment or status == FINISHED.FINISHED_FRAGMENT_RUN_SUCCESSFULLY  # a pushed run says which
                result.fragment = fragment
                if status == FINISHED.FINISHED_FRAGMENT_RUN_SUCCESSFULLY:
                    self.auto_reruns.update(timed)
                else:  # a full run: its timed fragments replace the last run's
                    self.auto_reruns = timed
                self._clear_stale(written, fragment, set(msg.metadata.run.fragment_ids))
                result.status, result.seconds = status, time.perf_counter() - start
                return result
            elif kind == "ref_hash":
                raise ProtocolError("the server sent a cached-message reference; this client announces no cache")

    def _apply_delta(self, path: tuple[int, ...], delta) -> None:
        which = delta.WhichOneof("type")
        if which == "new_element":
            element = delta.new_element
            self.nodes[path] = Node(path, element.WhichOneof("type") or "", element, delta.fragment_id)
        elif which == "add_block":
            self.nodes[path] = Node(path, "block", delta.add_block, delta.fragment_id)

    def _clear_stale(self, written: set[tuple[int, ...]], fragment: bool, fragment_ids: set[str]) -> None:
        """What a finished run did not redraw is gone (a fragment run: only within its fragments)."""
        for path, node in list(self.nodes.items()):
            if path in written:
                continue
            if not fragment or node.fragment_id in fragment_ids:
                del self.nodes[path]

    # --- reading the page --------------------------------------------------------------------------------------

    def elements(self, kind: str) -> list[Node]:
        return [n for _, n in sorted(self.nodes.items()) if n.kind == kind]

    def widget(self, key_or_label: str, kinds: tuple[str, ...] = WIDGETS) -> Node:
        """A widget by its key or its label (the key wins)."""
        found = [n for n in self.nodes.values() if n.kind in kinds]
        for match in (lambda n: widget_key(getattr(n.proto, n.kind).id) == key_or_label, lambda n: getattr(getattr(n.proto, n.kind), "label", None) == key_or_label):
            hits = [n for n in found if match(n)]
            if hits:
                return hits[0]
        raise KeyError(f"no widget {key_or_label!r} on the page (widgets: {sorted(str(getattr(getattr(n.proto, n.kind), 'label', '')) for n in found)})")

    def has_widget(self, key_or_label: str, kinds: tuple[str, ...] = WIDGETS) -> bool:
        try:
            self.widget(key_or_label, kinds)
        except KeyError:
            return False
        return True

    def options(self, key_or_label: str) -> list[str]:
        """The options of a selectbox, radio or multiselect as drawn (formatted labels: what set_widget sends)."""
        node = self.widget(key_or_label, ("selectbox", "radio", "multiselect"))
        return list(getattr(node.proto, node.kind).options)

    def metric(self, label: str) -> str | None:
        for node in self.elements("metric"):
            if node.proto.metric.label == label:
                return node.proto.metric.body
        return None

    def html_bodies(self) -> list[str]:
        return [n.proto.html.body for n in self.elements("html")]

    def token_stream(self) -> list[tuple[str, str]]:
        """The token stream(s) as drawn: (text, style) per piece, so equal streams mean equal tokens and fates."""
        parser = _Text()
        for body in self.html_bodies():
            if "specviz-stream" in body and "specviz-legend" not in body:
                parser.feed(body)
        return parser.spans

    def exceptions(self) -> list[str]:
        return [n.proto.exception.message for n in self.elements("exception")]

    def tracebacks(self) -> list[list[str]]:
        """The stack trace lines each drawn exception carries (empty where the server shows the message only)."""
        return [list(n.proto.exception.stack_trace) for n in self.elements("exception")]

    def texts(self) -> list[str]:
        """Every Markdown body drawn (st.markdown, st.caption, st.info, ...): what a reader sees as text."""
        return [n.proto.markdown.body for n in self.elements("markdown")] + self.alerts()

    def alerts(self, kind: str = "alert") -> list[str]:
        return [n.proto.alert.body for n in self.elements(kind)]

    # --- acting ------------------------------------------------------------------------------------------------

    def click(self, key_or_label: str) -> RunResult:
        """Press a button; inside a fragment only that fragment reruns, as in a browser."""
        node = self.widget(key_or_label, ("button",))
        return self.rerun(WidgetState(id=node.proto.button.id, trigger_value=True), node.fragment_id)

    def send_raw(self, key: str, fragment_id: str = "", **value) -> RunResult:
        """Send any value for the keyed widget, as a hostile client may (send_raw("lab_vocab", string_value="{")):
        one WidgetState field named by the keyword, kept with this client's values for later reruns. Any element
        with an id counts, a data editor too."""
        ids = [(getattr(n.proto, n.kind).id, n.fragment_id) for n in self.nodes.values() if n.kind != "block" and getattr(getattr(n.proto, n.kind), "id", "")]
        hits = [(i, f) for i, f in ids if widget_key(i) == key]
        if not hits:
            raise KeyError(f"no widget with key {key!r} on the page")
        state = WidgetState(id=hits[0][0], **value)
        self.values[state.id] = state
        return self.rerun(fragment_id=fragment_id or hits[0][1])

    def set_widget(self, key_or_label: str, value) -> RunResult:
        """Set a text box, number box, slider, toggle, selectbox or radio (by its option's label), or a multiselect
        (a list of option labels), and rerun."""
        node = self.stage(key_or_label, value)
        return self.rerun(fragment_id=node.fragment_id)

    def stage(self, key_or_label: str, value) -> Node:
        """Set a widget's value without a rerun: it goes with the next one (a click's, as a browser sends a typed
        key with the button press). Returns the widget's node."""
        node = self.widget(key_or_label)
        proto = getattr(node.proto, node.kind)
        state = WidgetState(id=proto.id)
        if node.kind in ("text_area", "text_input", "selectbox", "radio"):
            state.string_value = str(value)
        elif node.kind == "multiselect":
            state.string_array_value.data.extend(str(v) for v in value)
        elif node.kind == "number_input":
            state.double_value = float(value)
        elif node.kind in ("slider", "select_slider"):
            state.double_array_value.data.extend([float(value)])
        elif node.kind in ("checkbox", "toggle"):
            state.bool_value = bool(value)
        else:
            raise ValueError(f"setting a {node.kind} is not supported")
        self.values[proto.id] = state
        return node

    def send_value(self, key: str, kinds: tuple[str, ...], **fields) -> RunResult:
        """Send any WidgetState fields for a widget on the page (e.g. string_value for a data editor), valid or not,
        as a raw client can, and rerun."""
        node = self.widget(key, kinds)
        return self.send_state(getattr(node.proto, node.kind).id, node.fragment_id, **fields)

    def send_state(self, widget_id: str, fragment_id: str = "", **fields) -> RunResult:
        """The same by widget id: a browser still holds a widget's id (and sends its value) after a run that failed
        to draw it."""
        self.values[widget_id] = WidgetState(id=widget_id, **fields)
        return self.rerun(fragment_id=fragment_id)
