// /account, "Two-step verification" (contract §9): the authenticator app (TOTP) with its QR
// code and recovery codes, and the passkeys, through the browser client.
//
// The QR code is an SVG document from this service; it is shown as an <img> of a data: URL
// (the CSP allows `img-src 'self' data:`): an image runs no script and adds no style to the
// page, so nothing of it is ever parsed into the page's DOM. The key is shown as text too,
// for typing, and the otpauth:// link opens an authenticator app on this device.
import { explain, onSubmit, say } from "./page.js";

const $ = (id) => document.getElementById(id);

const MESSAGES = {
  invalid_code: "That code is not right. Enter the code the app shows now.",
  wrong_password: "The password is wrong.",
  passkey_cancelled: "The passkey was not created. Try again when you are ready.",
  passkey_exists: "This device already holds a passkey for your account.",
  passkey_unsupported: "This browser cannot create passkeys.",
};

function when(iso) {
  return new Date(iso).toLocaleString(undefined, { dateStyle: "medium", timeStyle: "short" });
}

/** Fill in the section; `attempt(task)` is the account page's error handling,
 * `sessionsChanged()` lists the sessions again (a change of factors may end some). */
export async function setUpSecondFactors(auth, attempt, { sessionsChanged }) {
  if (!$("second-factors") || !$("totp") || !$("passkeys")) return; // a team's own template
  const status = $("mfa-status");
  let recoveryText = "";

  async function showStatus() {
    const state = await auth.mfa.status();
    const on = state.totp === "enabled";
    $("totp-state").textContent = on
      ? `On. ${state.recovery_codes_remaining} of 10 recovery codes left.`
      : state.totp === "pending"
        ? "Set up but not confirmed yet: it is not used until a code confirms it."
        : "Not set up.";
    $("totp-start").hidden = on || !$("totp-enrol").hidden;
    $("totp-manage").hidden = !on;
    const factors = (on ? 1 : 0) + state.passkeys;
    $("mfa-summary").textContent = factors
      ? "Every sign-in with your password also asks for your authenticator app or a passkey."
      : "Add an authenticator app or a passkey: then a stolen password alone cannot sign in.";
    return state;
  }

  // --- the authenticator app ----------------------------------------------------------------

  $("totp-start").addEventListener("click", () =>
    attempt(async () => {
      const enrolment = await auth.mfa.enrolTotp();
      $("totp-qr").src = `data:image/svg+xml;charset=utf-8,${encodeURIComponent(enrolment.qr_svg)}`;
      $("totp-secret").textContent = enrolment.secret.replace(/(.{4})(?=.)/g, "$1 ");
      $("totp-link").href = enrolment.otpauth_uri;
      $("totp-start").hidden = true;
      $("totp-enrol").hidden = false;
      $("totp_confirm_code").focus();
    }),
  );

  function showRecoveryCodes(codes) {
    recoveryText = `${codes.join("\n")}\n`;
    $("recovery-list").replaceChildren(
      ...codes.map((code) => {
        const item = document.createElement("li");
        item.textContent = code;
        return item;
      }),
    );
    const download = $("recovery-download");
    if (download.href.startsWith("blob:")) URL.revokeObjectURL(download.href);
    download.href = URL.createObjectURL(new Blob([recoveryText], { type: "text/plain" }));
    $("recovery-box").hidden = false;
    $("recovery-heading").focus();
  }

  $("recovery-copy").addEventListener("click", () =>
    attempt(async () => {
      await navigator.clipboard.writeText(recoveryText);
      say(status, "The recovery codes are copied.");
    }),
  );

  $("recovery-done").addEventListener("click", () => {
    $("recovery-list").replaceChildren();
    recoveryText = "";
    $("recovery-box").hidden = true;
    $("totp-heading").scrollIntoView({ block: "nearest" });
  });

  onSubmit(
    $("totp-confirm-form"),
    async (data) => {
      const code = String(data.get("code")).replaceAll(/\s/g, "");
      const codes = await auth.mfa.confirmTotp(code);
      $("totp-confirm-form").reset();
      $("totp-enrol").hidden = true;
      $("totp-qr").removeAttribute("src");
      $("totp-secret").textContent = "";
      say(status, "The authenticator app is on. Your other sessions were signed out.");
      showRecoveryCodes(codes);
      await Promise.all([refresh(), sessionsChanged()]);
    },
    { messages: MESSAGES },
  );

  onSubmit(
    $("recovery-form"),
    async (data) => {
      const codes = await auth.mfa.regenerateRecoveryCodes(String(data.get("password")));
      $("recovery-form").reset();
      $("recovery-form").closest("details").open = false;
      say(status, "New recovery codes: the old ones no longer work.");
      showRecoveryCodes(codes);
      await showStatus();
    },
    { messages: MESSAGES },
  );

  onSubmit(
    $("totp-remove-form"),
    async (data) => {
      await auth.mfa.removeTotp(String(data.get("password")));
      $("totp-remove-form").reset();
      $("totp-remove-form").closest("details").open = false;
      $("recovery-box").hidden = true;
      say(status, "The authenticator app is removed. Your other sessions were signed out.");
      await Promise.all([refresh(), sessionsChanged()]);
    },
    { messages: MESSAGES },
  );

  // --- passkeys -------------------------------------------------------------------------------

  function field(labelText, input) {
    const box = document.createElement("div");
    box.className = "field";
    const label = document.createElement("label");
    label.htmlFor = input.id;
    label.textContent = labelText;
    box.append(label, input);
    return box;
  }

  function button(text, className, type = "button") {
    const element = document.createElement("button");
    element.type = type;
    element.className = `button ${className} small`;
    element.textContent = text;
    return element;
  }

  /** A small form inside a passkey's row: `inputs` and a submit button; Cancel puts the row
   * back. `handler(FormData)` runs on submit (errors go to the form's own alert). */
  function rowForm(item, passkey, { fields, submit, submitClass, handler }) {
    const form = document.createElement("form");
    form.className = "stack row-form";
    form.method = "post";
    form.action = "/account";
    const alert = document.createElement("p");
    alert.className = "alert";
    alert.setAttribute("role", "alert");
    const actions = document.createElement("div");
    actions.className = "choices";
    const cancel = button("Cancel", "secondary");
    cancel.addEventListener("click", () => item.replaceWith(passkeyItem(passkey)));
    actions.append(button(submit, submitClass, "submit"), cancel);
    form.append(alert, ...fields, actions);
    onSubmit(form, handler, { messages: MESSAGES });
    item.replaceChildren(form);
    form.querySelector("input").focus();
  }

  function passkeyItem(passkey) {
    const item = document.createElement("li");
    item.dataset.passkeyId = passkey.id;
    const text = document.createElement("div");
    const name = document.createElement("div");
    name.className = "device";
    name.textContent = passkey.name;
    const meta = document.createElement("div");
    meta.className = "meta";
    meta.textContent = `added ${when(passkey.created_at)} · ${
      passkey.last_used_at ? `last used ${when(passkey.last_used_at)}` : "not used yet"
    }`;
    text.append(name, meta);
    const actions = document.createElement("div");
    actions.className = "choices";
    const rename = button("Rename", "secondary");
    rename.setAttribute("aria-label", `Rename ${passkey.name}`);
    const remove = button("Remove", "secondary");
    remove.setAttribute("aria-label", `Remove ${passkey.name}`);
    actions.append(rename, remove);
    item.append(text, actions);

    rename.addEventListener("click", () => {
      const input = document.createElement("input");
      Object.assign(input, { id: `passkey-name-${passkey.id}`, name: "name", type: "text" });
      Object.assign(input, { maxLength: 64, required: true, value: passkey.name });
      rowForm(item, passkey, {
        fields: [field(`New name for ${passkey.name}`, input)],
        submit: "Save",
        submitClass: "primary",
        handler: async (data) => {
          const renamed = await auth.passkeys.rename(passkey.id, String(data.get("name")));
          say(status, `The passkey is now called ${renamed.name}.`);
          await showPasskeys();
        },
      });
    });
    remove.addEventListener("click", () => {
      const input = document.createElement("input");
      Object.assign(input, { id: `passkey-password-${passkey.id}`, name: "password" });
      Object.assign(input, { type: "password", autocomplete: "current-password" });
      Object.assign(input, { maxLength: 1024, required: true });
      rowForm(item, passkey, {
        fields: [field(`Password, to remove ${passkey.name}`, input)],
        submit: "Remove",
        submitClass: "danger",
        handler: async (data) => {
          await auth.passkeys.remove(passkey.id, String(data.get("password")));
          say(status, `${passkey.name} is removed. Your other sessions were signed out.`);
          await Promise.all([refresh(), sessionsChanged()]);
        },
      });
    });
    return item;
  }

  async function showPasskeys() {
    const list = $("passkey-list");
    const passkeys = await auth.passkeys.list();
    list.replaceChildren(...passkeys.map(passkeyItem));
    list.removeAttribute("aria-busy");
    $("passkeys-empty").hidden = passkeys.length > 0;
  }

  if (typeof globalThis.PublicKeyCredential !== "function") {
    $("passkey-add-form").hidden = true;
  }
  onSubmit(
    $("passkey-add-form"),
    async (data) => {
      const added = await auth.passkeys.register(String(data.get("name")).trim());
      $("passkey-add-form").reset();
      say(status, `The passkey ${added.name} is added.`);
      await Promise.all([refresh(), sessionsChanged()]);
    },
    { messages: MESSAGES },
  );

  async function refresh() {
    await Promise.all([showStatus(), showPasskeys()]);
  }

  await attempt(async () => {
    try {
      await refresh();
    } catch (error) {
      $("mfa-summary").textContent = "";
      say($("mfa-error"), explain(error));
    }
  });
}
