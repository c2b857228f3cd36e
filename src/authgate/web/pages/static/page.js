// What every page script shares: the browser client and the way forms report back.
//
// The client is `{prefix}/client.js` (contract §7); the prefix comes from the page's
// <meta name="authgate-prefix">, so these files stay static whatever the mount point.

const prefix = document.querySelector('meta[name="authgate-prefix"]')?.content ?? "/auth";

let loading = null;

/** The browser client, loaded once. */
export function client() {
  loading ??= import(`${prefix}/client.js`).then(({ createClient }) => createClient({ prefix }));
  return loading;
}

/** `{prefix}{path}`, for the rare request that must not go through the client. */
export function apiUrl(path) {
  return `${prefix}${path}`;
}

/** Put `text` in a live region (role="alert" or "status"); emptied first, so that the same
 * message twice is announced twice. */
export function say(element, text) {
  element.textContent = "";
  if (text) requestAnimationFrame(() => (element.textContent = text));
}

/** A problem a page script found itself, in words for a person. */
export class Problem extends Error {}

/** A sentence for a person from an AuthgateError (or anything thrown). */
export function explain(error) {
  if (error instanceof Problem) return error.message;
  if (!error || typeof error.status !== "number") {
    return "Something went wrong. Please try again.";
  }
  if (error.status === 0 && error.code !== "network_error") {
    return error.detail; // the browser refused something itself (a passkey ceremony)
  }
  if (error.status === 0) {
    return "The service cannot be reached. Check your connection and try again.";
  }
  if (error.status === 429) {
    const wait = error.retryAfter ? ` in ${seconds(error.retryAfter)}` : " later";
    return `Too many attempts. Please try again${wait}.`;
  }
  if (error.status >= 500 && error.code !== "not_configured") {
    return "The service is busy or briefly unavailable. Please try again in a moment.";
  }
  if (error.code === "validation_error") {
    return error.detail.replaceAll("Value error, ", "");
  }
  return error.detail || "Something went wrong. Please try again.";
}

function seconds(count) {
  if (count < 90) return `${count} second${count === 1 ? "" : "s"}`;
  const minutes = Math.ceil(count / 60);
  return minutes < 90 ? `${minutes} minutes` : `${Math.ceil(minutes / 60)} hours`;
}

/** Run `handler(FormData)` on submit instead of posting the form; its answer (a string) goes
 * to the form's role="status" element, an error to its role="alert" element. */
export function onSubmit(form, handler, { messages = {} } = {}) {
  const alert = form.querySelector('[role="alert"]');
  const status = form.querySelector('[role="status"]');
  const button = form.querySelector('button[type="submit"]');
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    say(alert, "");
    if (status) say(status, "");
    button.disabled = true;
    try {
      const done = await handler(new FormData(form));
      if (status && typeof done === "string") say(status, done);
    } catch (error) {
      say(alert, messages[error?.code] ?? explain(error));
      form.querySelector("input:not([type=hidden]):not(:disabled)")?.focus();
    } finally {
      button.disabled = false;
    }
  });
}

/** Tell whoever waits (a person's tab, a test) that the page's handlers are attached. */
export function ready() {
  document.documentElement.dataset.ready = "true";
}
