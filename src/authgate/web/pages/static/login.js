// /login: the password step through the browser client, then `?next=` (checked by the server,
// given as the form's data-next). An account with a second factor answers the password with a
// session that waits for it (contract §9): the same form then asks for a code from the
// authenticator app, a recovery code, or a passkey. "Use a passkey" under the form signs in
// with a passkey alone (a discoverable credential: no email typed).
import { client, explain, onSubmit, Problem, ready, say } from "./page.js";

const $ = (id) => document.getElementById(id);
const form = $("login-form");
const alert = $("login-error");
const auth = await client();
const passkeysWork = typeof globalThis.PublicKeyCredential === "function";

const messages = {
  invalid_credentials: "The email address or the password is wrong.",
  invalid_code: "That code is not right, or it was already used. Enter the newest code.",
  passkey_cancelled: "The passkey was not used. Try again, or choose another way.",
  passkey_unsupported: "This browser cannot use passkeys.",
};

let secondStep = false;
let usingRecoveryCode = false;

/** Off to where the person was going, signed in. */
function arrive() {
  location.assign(form.dataset.next);
}

function showSecondStep() {
  secondStep = true;
  $("first-step").disabled = true;
  $("first-step").hidden = true;
  $("passkey-first").hidden = true;
  $("second-step").disabled = false;
  $("second-step").hidden = false;
  $("second-step-choices").hidden = false;
  $("passkey-second").hidden = !passkeysWork;
  $("login-submit").textContent = "Verify";
  $("totp_code").focus();
}

async function passwordStep(data) {
  const result = await auth.login(String(data.get("email")), String(data.get("password")));
  if (result?.mfaRequired) {
    showSecondStep();
    return;
  }
  if (result) {
    arrive();
    return;
  }
  throw new Problem(
    "You were signed in, but this browser did not keep the session's cookies. " +
      "Allow cookies for this site (over plain HTTP the service must set AUTHGATE_COOKIE_SECURE=false).",
  );
}

async function codeStep(data) {
  if (usingRecoveryCode) {
    await auth.mfa.verify({ recoveryCode: String(data.get("recovery_code")).trim() });
  } else {
    await auth.mfa.verify({ code: String(data.get("code")).replaceAll(/\s/g, "") });
  }
  arrive();
}

onSubmit(form, (data) => (secondStep ? codeStep(data) : passwordStep(data)), { messages });

/** Switch between the app's code and a recovery code (the hidden field is disabled, so the
 * browser neither checks nor sends it). */
$("switch-factor").addEventListener("click", () => {
  usingRecoveryCode = !usingRecoveryCode;
  $("totp-field").hidden = usingRecoveryCode;
  $("totp_code").disabled = usingRecoveryCode;
  $("recovery-field").hidden = !usingRecoveryCode;
  $("recovery_code").disabled = !usingRecoveryCode;
  $("switch-factor").textContent = usingRecoveryCode
    ? "Use a code from the app instead"
    : "Use a recovery code instead";
  say(alert, "");
  (usingRecoveryCode ? $("recovery_code") : $("totp_code")).focus();
});

/** A passkey: alone (first step) or as the second step of this browser's password sign-in
 * (the server tells them apart by the session this browser holds). */
async function withPasskey(button) {
  say(alert, "");
  button.disabled = true;
  try {
    await auth.passkeys.signIn();
    arrive();
  } catch (error) {
    // A refused assertion is 400/401 (invalid_credentials among them): not about a password.
    const refused = error?.status === 400 || error?.status === 401;
    say(
      alert,
      refused
        ? "This passkey could not sign you in. Try again, or choose another way."
        : (messages[error?.code] ?? explain(error)),
    );
  } finally {
    button.disabled = false;
  }
}

$("passkey-sign-in").addEventListener("click", (event) => withPasskey(event.currentTarget));
$("passkey-second").addEventListener("click", (event) => withPasskey(event.currentTarget));

$("second-step-cancel").addEventListener("click", async () => {
  await auth.logout().catch(() => undefined); // ends the session that waits
  location.reload();
});

// --- start --------------------------------------------------------------------------------

$("passkey-first").hidden = !passkeysWork;
// A session already waiting for its second step (the page was reloaded, or /account sent the
// person here): ask for it at once.
try {
  await auth.me();
} catch (error) {
  if (error?.code === "mfa_required") showSecondStep();
}
ready();
