// Single sign-on (issue 30): the buttons of the master's identity providers
// (GET /master's sso_providers) on the sign-in page, and the WebUI's part of
// `oidc.always_redirect`.

import { get } from "../api.js";
import { h } from "../util.js";

/** The query parameter the master's callback page adds when it opens the UI. */
export const SSO_RETURN_PARAM = "sso";

/** The master's single sign-on providers ([{name, sso_url, always_redirect}]), or []. */
export async function ssoProviders() {
  try {
    return (await get("/master")).sso_providers || [];
  } catch {
    return [];
  }
}

/** A "Sign in with <provider>" link per provider (full page loads: data-external). */
export function ssoButtons(providers) {
  return providers.map((p, i) => h("a.button.sso-button", {
    id: i === 0 ? "sso-sign-in" : `sso-sign-in-${i}`,
    href: p.sso_url,
    dataset: { external: "1" },
  }, `Sign in with ${p.name}`));
}

/**
 * Whether this page load is the return from a single sign-on (the callback page opens
 * `/?sso=1`); the parameter is removed from the address either way.
 */
export function returnedFromSso() {
  const url = new URL(window.location.href);
  if (!url.searchParams.has(SSO_RETURN_PARAM)) return false;
  url.searchParams.delete(SSO_RETURN_PARAM);
  window.history.replaceState(null, "", url.pathname + url.search);
  return true;
}

/** Go to the provider at once when the master says so (`oidc.always_redirect`). */
export async function redirectIfAlways() {
  const first = (await ssoProviders())[0];
  if (first && first.always_redirect) {
    window.location.assign(first.sso_url);
    return true;
  }
  return false;
}
