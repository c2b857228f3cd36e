// /register: create the account, sign in with it, then go on to `?next=` (checked by the
// server, given as the form's data-next).
import { client, onSubmit, ready } from "./page.js";

const form = document.getElementById("register-form");
const auth = await client();

onSubmit(
  form,
  async (data) => {
    const email = String(data.get("email"));
    const password = String(data.get("password"));
    await auth.register(email, password);
    const user = await auth.login(email, password);
    location.assign(user ? form.dataset.next : "/login");
  },
  {
    messages: {
      email_taken: "An account with this email address already exists. Sign in instead.",
    },
  },
);

ready();
