// /login: the password step through the browser client, then `?next=` (checked by the server,
// given as the form's data-next). The second step of an account with a second factor branches
// off in `afterPassword` (issue 14 adds the factors' forms to #second-step).
import { apiUrl, client, onSubmit, Problem, ready } from "./page.js";

const form = document.getElementById("login-form");
const auth = await client();

onSubmit(
  form,
  async (data) => {
    const user = await auth.login(String(data.get("email")), String(data.get("password")));
    if (user) {
      location.assign(form.dataset.next);
      return;
    }
    await afterPassword();
  },
  { messages: { invalid_credentials: "The email address or the password is wrong." } },
);

/** The password was right but /me still refuses: a second factor is due (contract §9:
 * 401 `mfa_required`), or the browser did not keep the session's cookies. */
async function afterPassword() {
  const response = await fetch(apiUrl("/me"), {
    credentials: "include",
    headers: { Accept: "application/json" },
  });
  const body = await response.json().catch(() => null);
  if (body?.code === "mfa_required") {
    form.hidden = true;
    const step = document.getElementById("second-step");
    step.hidden = false;
    step.querySelector("input, button, a")?.focus();
    return;
  }
  throw new Problem(
    "You were signed in, but this browser did not keep the session's cookies. " +
      "Allow cookies for this site (over plain HTTP the service must set AUTHGATE_COOKIE_SECURE=false).",
  );
}

ready();
