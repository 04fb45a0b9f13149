"""The race played back in the browser: both lanes on one wall-clock axis, each round's text appearing at the time it
was committed, at the measured speed (1x) or slowed down. One self-contained HTML page (no library, no server
round trip): the page draws it once and the browser's animation frames do the rest, so 256 tokens play as smoothly
as 16 and playing costs no model time.

Safety: every string in it (token texts are model output, labels and the prompt are user input) travels as JSON inside
a ``<script type="application/json">`` element, with ``<``, ``>`` and ``&`` written as \\u escapes so nothing can close
the element, and is put on the page with textContent only, never as HTML.

For tests and curious readers, the page keeps its state on its elements: ``body[data-state]`` is idle, playing, paused
or done; each lane's ``data-shown`` counts the tokens on screen (of ``data-tokens``) and, once its last token is shown, ``data-done-ms``
holds the real milliseconds from the start of play to that moment (at 1x it should be about ``data-measured-s`` x 1000).
A stall (no animation frame for 250 ms: the page busy or hidden) holds the clock rather than jumping over the gap, and
is counted in ``body[data-stalled-ms]``; the autoplay waits until the player is on screen.
"""

from __future__ import annotations

import json

from specviz.core.race import RaceResult
from specviz.viz import style

SPEEDS = ((1.0, "1×"), (0.5, "½×"), (0.25, "¼×"), (0.1, "⅒×"))


def playback_data(race: RaceResult) -> dict:
    """What the page plays: per lane, each round's commit time, text and token count."""
    lanes = []
    for lane, kind in zip(race.lanes, ("plain", "speculative")):
        rounds = [{"t": round(t, 6), "text": "".join(race.token_text.get(i, "") for i in ids), "n": len(ids)} for t, ids in zip(lane.commit_s, lane.ids)]
        lanes.append({"kind": kind, "label": lane.label, "measured_s": lane.last_s, "tokens": lane.num_tokens, "rounds": rounds})
    return {"lanes": lanes, "end_s": max((lane.last_s or 0.0) for lane in race.lanes)}


def script_json(data: object) -> str:
    """JSON safe inside a <script> element: no <, > or & (and no non-ASCII) left as such."""
    text = json.dumps(data, ensure_ascii=True, separators=(",", ":"))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def playback_html(race: RaceResult, autoplay: bool = True) -> str:
    """The whole player as one HTML page."""
    options = "".join(f'<option value="{v}">{label}</option>' for v, label in SPEEDS)
    page = (  # the palette first: the data, which holds model text, goes in last so nothing in it is replaced
        PAGE.replace("__INK_LIGHT__", style.THEME_INK["light"]).replace("__INK_DARK__", style.THEME_INK["dark"])
        .replace("__HAIRLINE__", style.HAIRLINE).replace("__FLASH_PLAIN__", style.FLASH["plain"]).replace("__FLASH_SPEC__", style.FLASH["speculative"])
        .replace("__PLAIN__", style.GREY).replace("__SPEC__", style.SERIES[0]).replace("__CURSOR__", style.REJECTED)
    )
    return page.replace("__OPTIONS__", options).replace("__AUTOPLAY__", "true" if autoplay else "false").replace("__DATA__", script_json(playback_data(race)))


PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><style>
body{font-family:"Source Sans Pro",system-ui,sans-serif;margin:0;padding:4px 2px;color:__INK_LIGHT__;font-size:15px}
@media (prefers-color-scheme: dark){body{color:__INK_DARK__}}
.bar{display:flex;gap:10px;align-items:center;margin-bottom:8px;flex-wrap:wrap}
button,select{font:inherit;padding:3px 10px;border-radius:6px;border:1px solid __HAIRLINE__;background:transparent;color:inherit;cursor:pointer}
.clock{font-variant-numeric:tabular-nums;min-width:8em}
.lane{margin:6px 0 12px 0}
.head{display:flex;justify-content:space-between;font-weight:600;margin-bottom:3px}
.stat{font-weight:400;opacity:.8;font-variant-numeric:tabular-nums}
.text{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:13px;line-height:1.7;white-space:pre-wrap;
 word-break:break-word;height:8.5em;overflow-y:auto;border:1px solid __HAIRLINE__;border-radius:6px;padding:4px 6px}
.text span{border-radius:3px}
.text span.fresh{animation:flash 0.6s ease-out}
.speculative .text span.fresh{animation:flashb 0.6s ease-out}
@keyframes flash{from{background:__FLASH_PLAIN__}to{background:transparent}}
@keyframes flashb{from{background:__FLASH_SPEC__}to{background:transparent}}
.rug{position:relative;height:22px;border-bottom:1px solid __HAIRLINE__;margin-top:3px}
.tick{position:absolute;bottom:0;width:2px;background:__PLAIN__}
.speculative .tick{background:__SPEC__}
.cursor{position:absolute;top:-2px;bottom:-2px;width:2px;background:__CURSOR__;left:0}
.axis{display:flex;justify-content:space-between;font-size:12px;opacity:.7}
</style></head>
<body data-state="idle">
<div class="bar"><button id="play" type="button">▶ Play</button><button id="restart" type="button">↺ Restart</button>
<label>speed <select id="speed">__OPTIONS__</select></label><span class="clock" id="clock">t = 0.000 s</span></div>
<div id="lanes"></div>
<div class="axis"><span>0 s</span><span id="axis-end"></span></div>
<script type="application/json" id="race-data">__DATA__</script>
<script>
(function(){
const data = JSON.parse(document.getElementById("race-data").textContent);
const endS = Math.max(data.end_s, 1e-3);
const lanesBox = document.getElementById("lanes");
const lanes = data.lanes.map(function(lane){
  const box = document.createElement("div"); box.className = "lane " + lane.kind; box.dataset.kind = lane.kind;
  box.dataset.measuredS = String(lane.measured_s); box.dataset.tokens = String(lane.tokens); box.dataset.shown = "0";
  const head = document.createElement("div"); head.className = "head";
  const name = document.createElement("span"); name.textContent = lane.label;
  const stat = document.createElement("span"); stat.className = "stat";
  head.appendChild(name); head.appendChild(stat); box.appendChild(head);
  const text = document.createElement("div"); text.className = "text"; box.appendChild(text);
  const rug = document.createElement("div"); rug.className = "rug"; rug.title = "one mark per commit; its height is the tokens it carried";
  const maxN = Math.max.apply(null, lane.rounds.map(function(r){ return r.n; }).concat([1]));
  lane.rounds.forEach(function(r){
    const tick = document.createElement("div"); tick.className = "tick";
    tick.style.left = (100 * r.t / endS) + "%"; tick.style.height = (4 + 16 * r.n / maxN) + "px"; rug.appendChild(tick);
  });
  const cursor = document.createElement("div"); cursor.className = "cursor"; rug.appendChild(cursor);
  box.appendChild(rug); lanesBox.appendChild(box);
  return {spec: lane, box: box, text: text, stat: stat, cursor: cursor, next: 0, shown: 0};
});
document.getElementById("axis-end").textContent = endS.toFixed(2) + " s";
const clock = document.getElementById("clock"), playBtn = document.getElementById("play"), speedSel = document.getElementById("speed");
const STALL_MS = 250;
let speed = 1, offset = 0, startedAt = null, playStart = null, raf = null, lastFrame = null, stalledMs = 0;
function elapsed(now){ return startedAt === null ? offset : offset + (now - startedAt) / 1000 * speed; }
function status(lane, t){
  const s = lane.spec;
  lane.stat.textContent = lane.shown + " / " + s.tokens + " tokens" + (lane.next >= s.rounds.length ? " · done at " + s.measured_s.toFixed(2) + " s" : "");
}
function reset(){
  lanes.forEach(function(l){ l.text.textContent = ""; l.next = 0; l.shown = 0; l.box.dataset.shown = "0"; delete l.box.dataset.doneMs; l.cursor.style.left = "0"; status(l); });
  offset = 0; startedAt = null; playStart = null; lastFrame = null; stalledMs = 0; delete document.body.dataset.stalledMs; clock.textContent = "t = 0.000 s"; document.body.dataset.state = "idle"; playBtn.textContent = "▶ Play";
}
function frame(now){
  if (lastFrame !== null && now - lastFrame > STALL_MS) {  // the page was busy or hidden: hold the clock, do not jump
    const lost = now - lastFrame - 16; startedAt += lost; stalledMs += lost; document.body.dataset.stalledMs = String(Math.round(stalledMs));
  }
  lastFrame = now;
  const t = elapsed(now);
  let done = true;
  lanes.forEach(function(l){
    const rounds = l.spec.rounds;
    while (l.next < rounds.length && rounds[l.next].t <= t) {
      const r = rounds[l.next];
      const span = document.createElement("span"); span.textContent = r.text; span.className = "fresh"; l.text.appendChild(span);
      l.shown += r.n; l.next += 1; l.box.dataset.shown = String(l.shown);
      if (l.next === rounds.length) { l.box.dataset.doneMs = String(now - playStart); }
    }
    if (l.next < rounds.length) done = false;
    l.text.scrollTop = l.text.scrollHeight;
    l.cursor.style.left = Math.min(100, 100 * t / endS) + "%";
    status(l, t);
  });
  clock.textContent = "t = " + Math.min(t, endS).toFixed(3) + " s";
  if (done) { document.body.dataset.state = "done"; playBtn.textContent = "▶ Play"; startedAt = null; lastFrame = null; raf = null; return; }
  raf = requestAnimationFrame(frame);
}
function play(){
  if (document.body.dataset.state === "done") reset();
  const now = performance.now();
  startedAt = now; if (playStart === null) playStart = now;
  document.body.dataset.state = "playing"; playBtn.textContent = "⏸ Pause";
  raf = requestAnimationFrame(frame);
}
function pause(){
  offset = elapsed(performance.now()); startedAt = null; lastFrame = null;
  if (raf !== null) cancelAnimationFrame(raf); raf = null;
  document.body.dataset.state = "paused"; playBtn.textContent = "▶ Play";
}
playBtn.addEventListener("click", function(){ document.body.dataset.state === "playing" ? pause() : play(); });
document.getElementById("restart").addEventListener("click", function(){ if (raf !== null) cancelAnimationFrame(raf); raf = null; reset(); play(); });
speedSel.addEventListener("change", function(){
  const now = performance.now(); offset = elapsed(now); if (startedAt !== null) startedAt = now; speed = parseFloat(speedSel.value);
});
reset();
if (__AUTOPLAY__) {  // once the player is on screen and the page has settled (a busy page would stall the first frames)
  let started = false;
  const start = function(){ if (!started) { started = true; setTimeout(function(){ if (document.body.dataset.state === "idle") play(); }, 400); } };
  if ("IntersectionObserver" in window) {
    new IntersectionObserver(function(entries, obs){ if (entries.some(function(e){ return e.isIntersecting; })) { obs.disconnect(); start(); } }).observe(document.body);
  } else { start(); }
}
})();
</script></body></html>
"""
