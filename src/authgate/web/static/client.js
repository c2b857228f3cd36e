// authgate's browser client (contract §7): a dependency-free ES module, served by authgate at
// `{prefix}/client.js`, with its TypeScript declarations at `{prefix}/client.d.ts`.
//
//   import { createClient } from "/auth/client.js";
//   const auth = createClient();
//   const user = await auth.me();          // the user, or null when signed out
//
// Sessions live in authgate's cookies: the HttpOnly access and refresh cookies, and
// `svc_csrf_token`, which scripts read and echo in `X-CSRF-Token` on unsafe methods.
// When the access token has expired, `fetch` refreshes once and retries once. Refreshes are
// serialised across every tab of the origin with the Web Locks API: a tab that finds, once it
// holds the lock, that the CSRF cookie is no longer the one its request went out with knows
// another tab refreshed meanwhile, and only retries. Sign-in and sign-out reach the other tabs
// through a BroadcastChannel.
//
// Second factors (contract §9): `login` resolves to `{ mfaRequired: true }` when the account
// has one; the session then waits for `mfa.verify({ code })`, `mfa.verify({ recoveryCode })`
// or `passkeys.signIn()`, and until then `me()` rejects with code "mfa_required" (a 401 that
// is never refreshed: refreshing keeps the level). Both re-set the session's cookies, and every
// request reads them afresh, so the refresh logic goes on with the stepped-up session.

// authgate serves this file with its own mount prefix here.
const DEFAULT_PREFIX = "/auth";
const CSRF_COOKIE = "svc_csrf_token";
const CSRF_HEADER = "X-CSRF-Token";
const LOCK_NAME = "authgate-refresh";
const CHANNEL_NAME = "authgate";
const UNSAFE_METHODS = new Set(["POST", "PUT", "PATCH", "DELETE"]);
// Endpoints whose 401 says nothing about the access token: never refresh for them.
const NO_REFRESH = ["/login", "/register", "/refresh", "/logout", "/passkeys/login"];
const MFA_REQUIRED = "mfa_required";

/** An error answer of authgate (or no answer at all: status 0, code "network_error"). */
export class AuthgateError extends Error {
  constructor(status, code, detail, { retryAfter = null, errors = null } = {}) {
    super(detail);
    this.name = "AuthgateError";
    this.status = status;
    this.code = code;
    this.detail = detail;
    this.retryAfter = retryAfter;
    this.errors = errors;
  }
}

/** The value of a cookie readable by scripts, or null. */
function readCookie(name) {
  for (const part of document.cookie.split(";")) {
    const index = part.indexOf("=");
    if (index > 0 && part.slice(0, index).trim() === name) {
      return decodeURIComponent(part.slice(index + 1).trim()) || null;
    }
  }
  return null;
}

/** Runs `task` holding the origin-wide refresh lock; without Web Locks (an insecure context),
 * one lock per tab. */
let tabQueue = Promise.resolve();
function withRefreshLock(task) {
  if (globalThis.navigator?.locks?.request) {
    return navigator.locks.request(LOCK_NAME, task);
  }
  const run = tabQueue.then(task, task);
  tabQueue = run.catch(() => undefined);
  return run;
}

function retryAfterOf(response) {
  const value = response.headers.get("Retry-After");
  if (value === null) return null;
  const seconds = Number(value);
  if (Number.isFinite(seconds)) return seconds;
  const date = Date.parse(value);
  return Number.isNaN(date) ? null : Math.max(0, Math.ceil((date - Date.now()) / 1000));
}

/** True when a 401 answer says a second factor is due (a refresh would not help). */
async function isMfaRequired(response) {
  try {
    return (await response.clone().json())?.code === MFA_REQUIRED;
  } catch {
    return false;
  }
}

/** The `AuthgateError` for an error response: `{detail, code}`, or 422's list of problems. */
async function errorOf(response) {
  let body = null;
  try {
    body = await response.json();
  } catch {
    // not JSON: a proxy's page, an empty body
  }
  const retryAfter = retryAfterOf(response);
  if (body && Array.isArray(body.detail)) {
    const detail = body.detail.map((item) => item?.msg ?? String(item)).join("; ");
    return new AuthgateError(response.status, "validation_error", detail, {
      retryAfter,
      errors: body.detail,
    });
  }
  const code = typeof body?.code === "string" ? body.code : `http_${response.status}`;
  const detail = typeof body?.detail === "string" ? body.detail : response.statusText;
  return new AuthgateError(response.status, code, detail, { retryAfter });
}

export function createClient({ baseUrl = "", prefix = DEFAULT_PREFIX } = {}) {
  const root = String(baseUrl).replace(/\/+$/, "");
  const base = root + String(prefix).replace(/\/+$/, "");
  const here = globalThis.location?.href;
  const apiOrigin = new URL(base || "/", here).origin;
  const pageOrigin = here ? new URL(here).origin : apiOrigin;
  const listeners = new Set();
  const channel =
    typeof BroadcastChannel === "function" ? new BroadcastChannel(CHANNEL_NAME) : null;
  let lastType = null;

  const url = (path) => new URL(base + path, here).href;
  // The CSRF value and the refresh go only to authgate's origin and the page's own.
  const ours = (href) => [apiOrigin, pageOrigin].includes(new URL(href).origin);
  const refreshable = (href) => ours(href) && !NO_REFRESH.some((path) => href === url(path));

  function deliver(event) {
    lastType = event.type;
    for (const listener of [...listeners]) {
      try {
        listener(event);
      } catch (error) {
        queueMicrotask(() => {
          throw error; // report it, without stopping the other listeners
        });
      }
    }
  }

  /** Tell this tab's listeners and every other tab. A sign-out already known is not news. */
  function announce(type) {
    if (type === "signed-out" && lastType === "signed-out") return;
    deliver({ type, remote: false });
    channel?.postMessage({ type });
  }

  if (channel) {
    channel.onmessage = (message) => {
      const type = message.data?.type;
      if (type === "signed-in" || type === "signed-out") deliver({ type, remote: true });
    };
  }

  /** One request with the cookies, and the CSRF header on an unsafe method to our origins. */
  function send(request) {
    if (UNSAFE_METHODS.has(request.method) && ours(request.url)) {
      const csrf = readCookie(CSRF_COOKIE);
      if (csrf) {
        const headers = new Headers(request.headers);
        headers.set(CSRF_HEADER, csrf);
        return globalThis.fetch(new Request(request, { headers }));
      }
    }
    return globalThis.fetch(request);
  }

  /** Refresh once, unless another tab did since our request went out with `sentWith` (the
   * CSRF cookie then). True when the retry may succeed. */
  function refreshOnce(sentWith) {
    return withRefreshLock(async () => {
      const current = readCookie(CSRF_COOKIE);
      if (!current) return false; // signed out meanwhile
      if (current !== sentWith) return true; // another tab (or request) refreshed
      let response;
      try {
        response = await globalThis.fetch(url("/refresh"), {
          method: "POST",
          credentials: "include",
          headers: { [CSRF_HEADER]: current },
        });
      } catch {
        return false;
      }
      if (response.ok) return true;
      if (response.status === 401) {
        // The session is over (revoked, expired, reused): clear its cookies, tell every tab.
        await globalThis
          .fetch(url("/logout"), { method: "POST", credentials: "include" })
          .catch(() => undefined);
        announce("signed-out");
      }
      return false;
    });
  }

  /** `fetch` with the session: cookies, CSRF header, one refresh and one retry on a 401. */
  async function authFetch(input, init = {}) {
    const request = new Request(input, { credentials: "include", ...init });
    const spare = request.clone(); // the body again, for the one retry
    const sentWith = readCookie(CSRF_COOKIE);
    const response = await send(request);
    if (
      response.status !== 401 ||
      !sentWith ||
      !refreshable(request.url) ||
      (await isMfaRequired(response))
    ) {
      if (sentWith && !readCookie(CSRF_COOKIE)) announce("signed-out"); // cookies cleared
      return response;
    }
    if (!(await refreshOnce(sentWith))) return response;
    return send(spare); // a 401 here is the answer: no second refresh
  }

  /** `{prefix}{path}` with a JSON body; the parsed JSON answer (null when empty). */
  async function request(method, path, body) {
    const init = { method, headers: { Accept: "application/json" } };
    if (body !== undefined) {
      init.headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    let response;
    try {
      response = await authFetch(url(path), init);
    } catch (error) {
      throw new AuthgateError(0, "network_error", String(error?.message ?? error));
    }
    if (!response.ok) throw await errorOf(response);
    const text = await response.text();
    return text ? JSON.parse(text) : null;
  }

  async function me() {
    try {
      return await request("GET", "/me");
    } catch (error) {
      if (error instanceof AuthgateError && error.code === MFA_REQUIRED) throw error;
      if (error instanceof AuthgateError && error.status === 401) {
        if (lastType === "signed-in") announce("signed-out");
        return null;
      }
      throw error;
    }
  }

  async function login(email, password) {
    await request("POST", "/login", { email, password });
    let user;
    try {
      user = await me();
    } catch (error) {
      if (error instanceof AuthgateError && error.code === MFA_REQUIRED) {
        return { mfaRequired: true }; // signed in for the second step only: nothing to announce
      }
      throw error;
    }
    announce("signed-in");
    return user;
  }

  /** The session is at its full level now (new tokens and cookies): tell every tab. */
  async function steppedUp() {
    announce("signed-in");
    return me();
  }

  const mfa = {
    status: () => request("GET", "/mfa"),
    enrolTotp: () => request("POST", "/mfa/totp"),
    confirmTotp: async (code) =>
      (await request("POST", "/mfa/totp/confirm", { code: String(code) })).recovery_codes,
    removeTotp: (password) => request("DELETE", "/mfa/totp", { password }),
    regenerateRecoveryCodes: async (password) =>
      (await request("POST", "/mfa/recovery-codes", { password })).recovery_codes,
    async verify({ code, recoveryCode } = {}) {
      const body = recoveryCode !== undefined ? { recovery_code: recoveryCode } : { code };
      await request("POST", "/mfa/verify", body);
      return steppedUp();
    },
  };

  const passkeys = {
    list: async () => (await request("GET", "/passkeys")).passkeys,
    async register(name) {
      const options = await request("POST", "/passkeys/register/options");
      const credential = await ceremony("create", creationOptions(options));
      return request("POST", "/passkeys/register", { credential: toJSON(credential), name });
    },
    async signIn() {
      const options = await request("POST", "/passkeys/login/options");
      const credential = await ceremony("get", requestOptions(options));
      await request("POST", "/passkeys/login", { credential: toJSON(credential) });
      return steppedUp();
    },
    rename: (id, name) => request("PATCH", `/passkeys/${encodeURIComponent(id)}`, { name }),
    remove: (id, password) =>
      request("DELETE", `/passkeys/${encodeURIComponent(id)}`, { password }),
  };

  async function logout() {
    // Under the refresh lock: no other tab rotates the token while it is being revoked.
    await withRefreshLock(() => request("POST", "/logout"));
    announce("signed-out");
  }

  return {
    login,
    register: (email, password) => request("POST", "/register", { email, password }),
    logout,
    me,
    mfa,
    passkeys,
    fetch: authFetch,
    request,
    url,
    onChange(listener) {
      listeners.add(listener);
      return () => listeners.delete(listener);
    },
    close() {
      listeners.clear();
      channel?.close();
    },
  };
}

// --- passkeys: the WebAuthn ceremony in the browser -----------------------------------------
// The server's options are WebAuthn's JSON form (base64url for every byte string); browsers
// with `parseCreationOptionsFromJSON` / `toJSON` (WebAuthn Level 3) convert them themselves,
// the others through the few lines below.

function fromBase64url(text) {
  const base64 = text.replaceAll("-", "+").replaceAll("_", "/");
  const binary = atob(base64 + "=".repeat((4 - (base64.length % 4)) % 4));
  return Uint8Array.from(binary, (char) => char.charCodeAt(0)).buffer;
}

function toBase64url(buffer) {
  let binary = "";
  for (const byte of new Uint8Array(buffer)) binary += String.fromCharCode(byte);
  return btoa(binary).replaceAll("+", "-").replaceAll("/", "_").replace(/=+$/, "");
}

const withIds = (list) => list?.map((item) => ({ ...item, id: fromBase64url(item.id) }));

function creationOptions(answer) {
  const json = answer?.publicKey ?? answer;
  if (typeof PublicKeyCredential?.parseCreationOptionsFromJSON === "function") {
    return PublicKeyCredential.parseCreationOptionsFromJSON(json);
  }
  return {
    ...json,
    challenge: fromBase64url(json.challenge),
    user: { ...json.user, id: fromBase64url(json.user.id) },
    excludeCredentials: withIds(json.excludeCredentials),
  };
}

function requestOptions(answer) {
  const json = answer?.publicKey ?? answer;
  if (typeof PublicKeyCredential?.parseRequestOptionsFromJSON === "function") {
    return PublicKeyCredential.parseRequestOptionsFromJSON(json);
  }
  return {
    ...json,
    challenge: fromBase64url(json.challenge),
    allowCredentials: withIds(json.allowCredentials),
  };
}

function toJSON(credential) {
  if (typeof credential.toJSON === "function") return credential.toJSON();
  const response = {};
  for (const key of ["clientDataJSON", "attestationObject", "authenticatorData", "signature"]) {
    if (credential.response[key]) response[key] = toBase64url(credential.response[key]);
  }
  if (credential.response.userHandle) {
    response.userHandle = toBase64url(credential.response.userHandle);
  }
  if (typeof credential.response.getTransports === "function") {
    response.transports = credential.response.getTransports();
  }
  return {
    id: credential.id,
    rawId: toBase64url(credential.rawId),
    type: credential.type,
    authenticatorAttachment: credential.authenticatorAttachment ?? undefined,
    clientExtensionResults: credential.getClientExtensionResults(),
    response,
  };
}

/** `navigator.credentials.create/get`; what the browser refuses becomes an AuthgateError of
 * status 0: "passkey_unsupported", "passkey_cancelled" (dismissed, timed out, not allowed),
 * "passkey_exists" (this authenticator already holds one for the account). */
async function ceremony(kind, publicKey) {
  if (!globalThis.navigator?.credentials || typeof PublicKeyCredential !== "function") {
    throw new AuthgateError(0, "passkey_unsupported", "This browser does not support passkeys.");
  }
  try {
    const credential = await navigator.credentials[kind]({ publicKey });
    if (!credential) throw new DOMException("no credential", "NotAllowedError");
    return credential;
  } catch (error) {
    if (error?.name === "InvalidStateError") {
      throw new AuthgateError(0, "passkey_exists", "This device already has a passkey here.");
    }
    if (error?.name === "NotAllowedError" || error?.name === "AbortError") {
      throw new AuthgateError(0, "passkey_cancelled", "The passkey was not used.");
    }
    throw new AuthgateError(0, "passkey_failed", String(error?.message ?? error));
  }
}
