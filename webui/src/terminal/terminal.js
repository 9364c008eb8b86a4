// The browser terminal of a shell task: xterm.js over the shell's WebSocket, the one
// `det shell` uses (docs/protocol.md, "Generic tasks"; dauntless.exec.task_service).
// The page is served at /proxy/<task id>/ on the task's proxy origin, so the WebSocket
// to /proxy/<task id>/pty carries the task's proxy cookie. Messages: binary frames are
// the terminal's bytes both ways; text frames are JSON, {"resize": [rows, cols]} from
// here and {"exit": code} from the shell before it closes the session.

import { FitAddon } from "@xterm/addon-fit";
import { Terminal } from "@xterm/xterm";

const match = window.location.pathname.match(/^\/proxy\/([^/]+)\//);
const taskId = match ? decodeURIComponent(match[1]) : "";
const status = document.getElementById("status");
const again = document.getElementById("reconnect");
document.getElementById("title").textContent = `Shell ${taskId}`;
document.title = `Shell ${taskId}`;

const term = new Terminal({
  cursorBlink: true,
  fontFamily: "ui-monospace, 'DejaVu Sans Mono', Menlo, Consolas, monospace",
  fontSize: 14,
  scrollback: 5000,
  theme: { background: "#1e1e1e" },
});
const fit = new FitAddon();
term.loadAddon(fit);
term.open(document.getElementById("terminal"));
fit.fit();
// For tests and debugging: the terminal object (its buffer holds what is shown).
window.dauntlessTerminal = term;

const encoder = new TextEncoder();
let ws = null;

function setStatus(state, text) {
  status.dataset.state = state;
  status.textContent = text;
}

/** Send bytes (a string is UTF-8 encoded) to the shell if the session is open. */
function sendBytes(data) {
  if (ws && ws.readyState === WebSocket.OPEN) ws.send(typeof data === "string" ? encoder.encode(data) : data);
}

term.onData((data) => sendBytes(data));
// Binary input (some mouse reports) arrives as a string of byte values.
term.onBinary((data) => sendBytes(Uint8Array.from(data, (c) => c.charCodeAt(0) & 0xff)));
term.onResize(({ rows, cols }) => {
  if (ws && ws.readyState === WebSocket.OPEN) ws.send(JSON.stringify({ resize: [rows, cols] }));
});
window.addEventListener("resize", () => fit.fit());

/** Open a session: a login shell under a pseudo-terminal of this terminal's size. */
function connect() {
  again.hidden = true;
  setStatus("connecting", "connecting…");
  delete document.body.dataset.exit;
  const query = new URLSearchParams({ rows: String(term.rows), cols: String(term.cols), term: "xterm-256color" });
  const scheme = window.location.protocol === "https:" ? "wss" : "ws";
  const socket = new WebSocket(`${scheme}://${window.location.host}/proxy/${encodeURIComponent(taskId)}/pty?${query}`);
  socket.binaryType = "arraybuffer";
  ws = socket;
  let exitCode = null;
  socket.addEventListener("open", () => {
    setStatus("open", "connected");
    term.focus();
  });
  socket.addEventListener("message", (ev) => {
    if (typeof ev.data !== "string") {
      term.write(new Uint8Array(ev.data));
      return;
    }
    let ctl = null;
    try { ctl = JSON.parse(ev.data); } catch { return; }
    if (ctl && Number.isInteger(ctl.exit)) exitCode = ctl.exit;
  });
  socket.addEventListener("close", (ev) => {
    if (ws !== socket) return;
    ws = null;
    if (exitCode !== null) {
      document.body.dataset.exit = String(exitCode);
      term.write(`\r\n[the session ended with exit code ${exitCode}]\r\n`);
      setStatus("closed", `session ended (exit code ${exitCode})`);
    } else {
      // 1006: refused before it opened (the task ended, or this page's sign-in did).
      const why = ev.reason || (ev.code === 1006 ? "the connection was refused or lost" : `code ${ev.code}`);
      term.write(`\r\n[disconnected: ${why}]\r\n`);
      setStatus("closed", `disconnected: ${why}`);
    }
    again.hidden = false;
  });
}

again.addEventListener("click", connect);
connect();
