// The sign-in page, shown instead of any page while the master answers 401.

import { ApiError, login } from "../api.js";
import { h, setChildren } from "../util.js";
import { ssoButtons, ssoProviders } from "./sso.js";

/**
 * Draw the sign-in form into `root`.
 * @param {HTMLElement} root
 * @param {function(object): void} onSignedIn  called with the user after a sign-in
 * @param {string} [reason]  why the form is shown (e.g. "your session expired")
 */
export function render(root, onSignedIn, reason) {
  const username = h("input", {
    id: "login-username", name: "username", autocomplete: "username", required: true,
    "aria-label": "user name", value: "",
  });
  const password = h("input", {
    id: "login-password", name: "password", type: "password", autocomplete: "current-password",
    "aria-label": "password",
  });
  const error = h("p.login-error", { id: "login-error", role: "alert", hidden: true });
  const submit = h("button.primary", { id: "login-submit", type: "submit" }, "Sign in");

  async function onSubmit(ev) {
    ev.preventDefault();
    submit.disabled = true;
    error.hidden = true;
    try {
      const user = await login(username.value.trim(), password.value);
      onSignedIn(user);
    } catch (err) {
      error.textContent = err instanceof ApiError && err.status === 401
        ? "Invalid user name or password."
        : `Could not sign in: ${err.message}`;
      error.hidden = false;
      password.select();
    } finally {
      submit.disabled = false;
    }
  }

  const sso = h("div.sso-box", { id: "sso-box" });
  setChildren(root, h("div.card.login-card", { id: "login-page" },
    h("h1", null, "Sign in"),
    reason ? h("p.muted", null, reason) : null,
    h("form", { id: "login-form", onsubmit: onSubmit },
      h("label", null, "User name", username),
      h("label", null, "Password", password),
      error,
      submit),
    sso));
  username.focus();
  ssoProviders().then((providers) => {
    if (providers.length) setChildren(sso, h("p.muted.small", null, "or"), ssoButtons(providers));
  });
}
