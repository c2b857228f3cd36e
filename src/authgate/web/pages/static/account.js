// /account: the signed-in person's profile, sessions, password, email address, second factors
// (second_factors.js) and deletion, all through the JSON API (contract §5) with the browser client, which adds the CSRF header
// and refreshes the session when the access token has expired. Not signed in (or signed out
// in another tab): off to /login, back here afterwards.
import { client, explain, onSubmit, ready, say } from "./page.js";
import { setUpSecondFactors } from "./second_factors.js";

const LOGIN = "/login?next=%2Faccount";
const $ = (id) => document.getElementById(id);
const auth = await client();
const problem = $("account-error");

// Signed out in another tab: this one follows. (This tab's own sign-outs go where they say.)
auth.onChange((event) => {
  if (event.type === "signed-out" && event.remote) location.assign(LOGIN);
});

/** Run `task`; an error goes to the page's alert. */
async function attempt(task) {
  say(problem, "");
  try {
    await task();
  } catch (error) {
    if (error?.status === 401) location.assign(LOGIN);
    else say(problem, explain(error));
  }
}

// --- profile ---------------------------------------------------------------------------

function showProfile(user) {
  $("profile-email").textContent = user.email;
  $("profile-email").removeAttribute("aria-busy");
  $("profile-verified").textContent = user.email_verified ? "Confirmed" : "Not confirmed yet";
  $("verify-box").hidden = user.email_verified;
}

$("send-verification").addEventListener("click", () =>
  attempt(async () => {
    try {
      const answer = await auth.request("POST", "/email-verification");
      say($("profile-status"), answer.message);
    } catch (error) {
      if (error?.code !== "not_configured") throw error;
      say(problem, "Confirmation emails are not set up for this service.");
    }
  }),
);

$("sign-out").addEventListener("click", () =>
  attempt(async () => {
    await auth.logout();
    location.assign("/login");
  }),
);

// --- sessions --------------------------------------------------------------------------

/** "Chrome on Linux" from a User-Agent header, or the header itself when unknown. */
function device(agent) {
  if (!agent) return "Unknown device";
  const browser =
    [
      ["Edg/", "Edge"],
      ["OPR/", "Opera"],
      ["Firefox/", "Firefox"],
      ["Chrome/", "Chrome"],
      ["Safari/", "Safari"],
      ["curl/", "curl"],
    ].find(([mark]) => agent.includes(mark))?.[1] ?? null;
  const system =
    [
      ["Android", "Android"],
      ["iPhone", "iPhone"],
      ["iPad", "iPad"],
      ["Windows", "Windows"],
      ["Mac OS X", "macOS"],
      ["CrOS", "ChromeOS"],
      ["Linux", "Linux"],
    ].find(([mark]) => agent.includes(mark))?.[1] ?? null;
  if (browser && system) return `${browser} on ${system}`;
  return browser ?? system ?? agent.slice(0, 60);
}

function when(iso) {
  return new Date(iso).toLocaleString(undefined, { dateStyle: "medium", timeStyle: "short" });
}

function sessionItem(session) {
  const item = document.createElement("li");
  item.dataset.sessionId = session.id;
  const text = document.createElement("div");
  const name = document.createElement("div");
  name.className = "device";
  name.textContent = device(session.user_agent);
  if (session.current) {
    const badge = document.createElement("span");
    badge.className = "badge";
    badge.textContent = "This device";
    name.append(badge);
  }
  const meta = document.createElement("div");
  meta.className = "meta";
  meta.textContent = [session.ip, `last active ${when(session.last_active_at)}`]
    .filter(Boolean)
    .join(" · ");
  text.append(name, meta);
  const button = document.createElement("button");
  button.type = "button";
  button.className = "button secondary small";
  button.textContent = "Sign out";
  button.setAttribute("aria-label", `Sign out ${name.firstChild.textContent}${session.current ? " (this device)" : ""}`);
  button.addEventListener("click", () => signOut(session));
  item.append(text, button);
  return item;
}

async function showSessions() {
  const list = $("session-list");
  const { sessions } = await auth.request("GET", "/sessions");
  list.replaceChildren(...sessions.map(sessionItem));
  list.removeAttribute("aria-busy");
  $("sign-out-others").hidden = !sessions.some((session) => !session.current);
}

function signOut(session) {
  return attempt(async () => {
    if (session.current) {
      await auth.logout();
      location.assign("/login");
      return;
    }
    await auth.request("DELETE", `/sessions/${encodeURIComponent(session.id)}`);
    say($("sessions-status"), `Signed out of ${device(session.user_agent)}.`);
    await showSessions();
  });
}

$("sign-out-others").addEventListener("click", () =>
  attempt(async () => {
    const { revoked } = await auth.request("DELETE", "/sessions");
    say($("sessions-status"), `Signed out of ${revoked} other session${revoked === 1 ? "" : "s"}.`);
    await showSessions();
  }),
);

// --- password, email, deletion ------------------------------------------------------------

onSubmit(
  $("password-form"),
  async (data) => {
    const answer = await auth.request("POST", "/password-change", {
      current_password: String(data.get("current_password")),
      new_password: String(data.get("new_password")),
    });
    $("password-form").reset();
    await showSessions();
    return answer.message;
  },
  { messages: { wrong_password: "The current password is wrong." } },
);

onSubmit(
  $("email-form"),
  async (data) => {
    const newEmail = String(data.get("new_email"));
    await auth.request("POST", "/email-change", {
      new_email: newEmail,
      password: String(data.get("password")),
    });
    $("email-form").reset();
    return `We sent a link to ${newEmail}. Your address changes when you open it.`;
  },
  {
    messages: {
      wrong_password: "The password is wrong.",
      email_taken: "Another account already uses this email address.",
      not_configured: "Changing the email address is not set up for this service.",
    },
  },
);

onSubmit(
  $("delete-form"),
  async (data) => {
    await auth.request("DELETE", "/me", { password: String(data.get("password")) });
    await auth.logout().catch(() => undefined); // tells the other tabs
    const heading = document.createElement("h1");
    heading.textContent = "Your account has been deleted";
    const text = document.createElement("p");
    text.textContent = "Your account and everything it held are gone. Thank you for using it.";
    const link = document.createElement("a");
    link.href = "/register";
    link.className = "button secondary";
    link.textContent = "Create a new account";
    $("main").replaceChildren(heading, text, link);
    heading.tabIndex = -1;
    heading.focus();
  },
  { messages: { wrong_password: "The password is wrong." } },
);

// --- start --------------------------------------------------------------------------------

await attempt(async () => {
  const user = await auth.me();
  if (!user) {
    location.replace(LOGIN);
    return;
  }
  showProfile(user);
  await showSessions();
  // Adding the first factor or removing one signs the other sessions out: list them again.
  await setUpSecondFactors(auth, attempt, { sessionsChanged: showSessions });
});
ready();
