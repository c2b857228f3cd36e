// Type declarations of authgate's browser client, served at `{prefix}/client.d.ts` beside
// `{prefix}/client.js`.

/** What `GET {prefix}/me` answers. */
export interface User {
  id: number;
  email: string;
  is_active: boolean;
  is_superuser: boolean;
  email_verified: boolean;
}

/** What `login` resolves to when the account has a second factor: the session exists but
 * waits for `mfa.verify(...)` or `passkeys.signIn()` (contract §9). */
export interface MfaRequired {
  mfaRequired: true;
}

/** `GET {prefix}/mfa`. */
export interface MfaStatus {
  /** "pending": set up but not confirmed by a code yet. */
  totp: "none" | "pending" | "enabled";
  recovery_codes_remaining: number;
  passkeys: number;
}

/** `POST {prefix}/mfa/totp`: what an authenticator app needs (pending until confirmed). */
export interface TotpEnrolment {
  /** Base32, for typing into the app. */
  secret: string;
  otpauth_uri: string;
  /** The otpauth URI as a QR code: an SVG document (show it as an image). */
  qr_svg: string;
}

/** One passkey of the signed-in user (ISO 8601 times). */
export interface Passkey {
  id: number;
  name: string;
  created_at: string;
  last_used_at: string | null;
}

export interface MfaApi {
  /** GET {prefix}/mfa. */
  status(): Promise<MfaStatus>;
  /** POST {prefix}/mfa/totp: a new pending secret (replaces a pending one). */
  enrolTotp(): Promise<TotpEnrolment>;
  /** POST {prefix}/mfa/totp/confirm: the 10 recovery codes, shown once. 400 invalid_code. */
  confirmTotp(code: string): Promise<string[]>;
  /** DELETE {prefix}/mfa/totp (the user's other sessions end). 403 wrong_password. */
  removeTotp(password: string): Promise<null>;
  /** POST {prefix}/mfa/recovery-codes: a new set; the old codes stop working. */
  regenerateRecoveryCodes(password: string): Promise<string[]>;
  /** POST {prefix}/mfa/verify with a TOTP code or a recovery code: the session steps up
   * (new tokens and cookies), "signed-in" is announced, and it resolves to the user.
   * 400 invalid_code, 429 rate_limited (see `retryAfter`). */
  verify(factor: { code: string } | { recoveryCode: string }): Promise<User | null>;
}

export interface PasskeysApi {
  /** GET {prefix}/passkeys. */
  list(): Promise<Passkey[]>;
  /** The whole registration ceremony: options from the server, `navigator.credentials.create`,
   * the credential back to the server. Resolves to the new passkey. */
  register(name: string): Promise<Passkey>;
  /** The whole sign-in ceremony with a discoverable credential (no email): a new session at
   * aal2, or the second step of this browser's password sign-in. Announces "signed-in" and
   * resolves to the user. */
  signIn(): Promise<User | null>;
  /** PATCH {prefix}/passkeys/{id}. */
  rename(id: number, name: string): Promise<Passkey>;
  /** DELETE {prefix}/passkeys/{id} (the user's other sessions end). 403 wrong_password. */
  remove(id: number, password: string): Promise<null>;
}

/** A session change: in this tab (`remote: false`) or another tab of the origin. */
export interface ChangeEvent {
  type: "signed-in" | "signed-out";
  remote: boolean;
}

export interface ClientOptions {
  /** Origin of authgate when it is not the page's own, e.g. "https://auth.example.com"
   * (its cookies must then be readable on the page's site). Default "" (the page's origin). */
  baseUrl?: string;
  /** authgate's mount prefix. Default "/auth". */
  prefix?: string;
}

/** An error answer of authgate: `{detail, code}` with its status. A request that got no
 * answer at all has status 0 and code "network_error"; a 422 has code "validation_error",
 * `detail` joining the messages and `errors` holding FastAPI's list. A passkey ceremony the
 * browser refused has status 0 and code "passkey_cancelled" (dismissed, timed out),
 * "passkey_exists", "passkey_unsupported" or "passkey_failed". While a second factor is due,
 * authenticated calls reject with status 401 and code "mfa_required". */
export class AuthgateError extends Error {
  constructor(
    status: number,
    code: string,
    detail: string,
    extra?: { retryAfter?: number | null; errors?: unknown[] | null },
  );
  readonly name: "AuthgateError";
  readonly status: number;
  readonly code: string;
  readonly detail: string;
  /** Seconds from the Retry-After header (429, 503), else null. */
  readonly retryAfter: number | null;
  readonly errors: unknown[] | null;
}

export interface AuthgateClient {
  /** POST {prefix}/login, then announce "signed-in" to every tab; resolves to the user, or
   * to `{ mfaRequired: true }` (nothing announced yet) when a second factor is due.
   * Rejects with AuthgateError (401 invalid_credentials, 429 rate_limited, 422). */
  login(email: string, password: string): Promise<User | MfaRequired | null>;
  /** POST {prefix}/register: the new user (it does not sign in). 409 email_taken, 422. */
  register(email: string, password: string): Promise<User>;
  /** POST {prefix}/logout (the cookies are cleared, the session revoked), then announce
   * "signed-out" to every tab. */
  logout(): Promise<void>;
  /** GET {prefix}/me: the user, or null when signed out (after one refresh attempt).
   * Rejects with AuthgateError code "mfa_required" while a second factor is due. */
  me(): Promise<User | null>;
  /** Second factors: TOTP and recovery codes. */
  readonly mfa: MfaApi;
  /** Passkeys (WebAuthn): sign-in and the signed-in user's list. */
  readonly passkeys: PasskeysApi;
  /** Like window.fetch, for authgate's and the page's own origin: sends the cookies, adds
   * X-CSRF-Token to POST/PUT/PATCH/DELETE, and on a 401 refreshes the session once (one
   * refresh across all tabs) and retries once. A 401 after that is returned as it is. */
  fetch(input: RequestInfo | URL, init?: RequestInit): Promise<Response>;
  /** `{prefix}{path}` through `fetch`, with `body` as JSON: resolves to the parsed answer
   * (null for an empty one, such as 204), rejects with AuthgateError. */
  request<T = unknown>(method: string, path: string, body?: unknown): Promise<T>;
  /** The absolute URL of `{prefix}{path}`. */
  url(path: string): string;
  /** Listen for sign-in and sign-out in every tab; returns the unsubscribe function. */
  onChange(listener: (event: ChangeEvent) => void): () => void;
  /** Stop listening to the other tabs (drops every listener). */
  close(): void;
}

export function createClient(options?: ClientOptions): AuthgateClient;
