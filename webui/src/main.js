// The WebUI's entry point: a small router over the page modules. Every page exports
// `render(root, params)`, which draws into `root` and returns a function that stops its
// streams and charts when the user navigates away.

import * as cluster from "./pages/cluster.js";
import * as experiment from "./pages/experiment.js";
import * as experiments from "./pages/experiments.js";
import * as trial from "./pages/trial.js";
import { h, setChildren } from "./util.js";

const ROUTES = [
  [/^\/(?:experiments\/?)?$/, experiments, "experiments"],
  [/^\/experiments\/(\d+)\/?$/, experiment, "experiments"],
  [/^\/trials\/(\d+)\/?$/, trial, "experiments"],
  [/^\/cluster\/?$/, cluster, "cluster"],
];

let cleanup = null;

function route() {
  const root = document.getElementById("app");
  if (cleanup) cleanup();
  cleanup = null;
  const path = window.location.pathname;
  for (const [pattern, page, nav] of ROUTES) {
    const m = path.match(pattern);
    if (!m) continue;
    for (const a of document.querySelectorAll("[data-nav]")) {
      a.classList.toggle("active", a.dataset.nav === nav);
    }
    setChildren(root);
    cleanup = page.render(root, m.slice(1).map(Number)) || null;
    return;
  }
  setChildren(root, h("div.card", null, h("h1", null, "Not found"),
    h("p", null, "No page at ", h("code", null, path), ". ", h("a", { href: "/" }, "Experiments"))));
}

/** Go to a path of the UI without reloading the page. */
export function navigate(path) {
  if (path === window.location.pathname + window.location.search) return;
  window.history.pushState(null, "", path);
  route();
}

document.addEventListener("click", (ev) => {
  const a = ev.target.closest("a");
  if (!a || ev.defaultPrevented || ev.button !== 0 || ev.metaKey || ev.ctrlKey || ev.shiftKey) return;
  const url = new URL(a.href, window.location.href);
  if (url.origin !== window.location.origin || a.dataset.external || a.target) return;
  if (url.pathname.startsWith("/api/") || url.pathname.startsWith("/docs")) return;
  ev.preventDefault();
  navigate(url.pathname + url.search);
});

window.addEventListener("popstate", route);
route();
