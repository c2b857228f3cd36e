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
 * `detail` joining the messages and `errors` holding FastAPI's list. */
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
  /** POST {prefix}/login, then announce "signed-in" to every tab; resolves to the user.
   * Rejects with AuthgateError (401 invalid_credentials, 429 rate_limited, 422). */
  login(email: string, password: string): Promise<User | null>;
  /** POST {prefix}/register: the new user (it does not sign in). 409 email_taken, 422. */
  register(email: string, password: string): Promise<User>;
  /** POST {prefix}/logout (the cookies are cleared, the session revoked), then announce
   * "signed-out" to every tab. */
  logout(): Promise<void>;
  /** GET {prefix}/me: the user, or null when signed out (after one refresh attempt). */
  me(): Promise<User | null>;
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
