// A real OpenID Provider for the single sign-on tests: npm's `oidc-provider` (a certified
// OpenID Connect implementation), started by tests/oidc_provider.py.
//
// Usage: node provider.mjs CONFIG.json
// CONFIG.json: {"module": "<the installed package's lib/index.js>", "port": N, "client_id": "...", "client_secret": "...",
//               "redirect_uris": ["http://127.0.0.1:P/oidc/callback"],
//               "accounts": {"alice": {"email": "...", "name": "...", "groups": ["..."]}}}
//
// Its development sign-in form accepts any login name and any password (that is what
// the package ships for trying it out); the account's claims come from "accounts" (an
// unknown name gets only `sub` and `email` = NAME@example.test). The consent step is
// skipped for the one configured client, as an organisation's own IdP does for its
// first-party applications. Prints "listening ISSUER" on stdout once it accepts requests.

import { readFileSync } from "node:fs";
import process from "node:process";
import { pathToFileURL } from "node:url";

const config = JSON.parse(readFileSync(process.argv[2], "utf8"));
// Installed under .venv/ (scripts/test.sh), not beside this file: imported by its path.
const { default: Provider } = await import(pathToFileURL(config.module).href);
const issuer = `http://127.0.0.1:${config.port}`;
const accounts = config.accounts || {};

const provider = new Provider(issuer, {
  clients: [{
    client_id: config.client_id,
    client_secret: config.client_secret,
    redirect_uris: config.redirect_uris,
    grant_types: ["authorization_code"],
    response_types: ["code"],
    token_endpoint_auth_method: "client_secret_basic",
  }],
  claims: {
    openid: ["sub"],
    email: ["email", "email_verified"],
    profile: ["name"],
    groups: ["groups"],
  },
  scopes: ["openid", "email", "profile", "groups"],
  // Claims in the ID token too, not only from the userinfo endpoint: the master reads both.
  conformIdTokenClaims: false,
  cookies: { keys: [config.client_secret + "-cookie-key"] },
  async findAccount(ctx, sub) {
    const claims = accounts[sub] || {};
    return {
      accountId: sub,
      async claims() {
        return {
          sub,
          email: claims.email || `${sub}@example.test`,
          email_verified: true,
          name: claims.name || sub,
          groups: claims.groups || [],
        };
      },
    };
  },
  async loadExistingGrant(ctx) {
    const grantId = ctx.oidc.result?.consent?.grantId
      || ctx.oidc.session.grantIdFor(ctx.oidc.client.clientId);
    if (grantId) return ctx.oidc.provider.Grant.find(grantId);
    const grant = new ctx.oidc.provider.Grant({
      clientId: ctx.oidc.client.clientId,
      accountId: ctx.oidc.session.accountId,
    });
    grant.addOIDCScope("openid email profile groups");
    await grant.save();
    return grant;
  },
});

const server = provider.listen(config.port, "127.0.0.1", () => {
  process.stdout.write(`listening ${issuer}\n`);
});
for (const sig of ["SIGTERM", "SIGINT"]) process.on(sig, () => server.close(() => process.exit(0)));
