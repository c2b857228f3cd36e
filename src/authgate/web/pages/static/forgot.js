// /forgot-password: ask for a reset link. The answer is the same whether or not the address
// has an account.
import { client, onSubmit, ready } from "./page.js";

const form = document.getElementById("forgot-form");
const auth = await client();

onSubmit(
  form,
  async (data) => {
    await auth.request("POST", "/password-reset", { email: String(data.get("email")) });
    return "If an account uses this address, a link to choose a new password is on its way. Check your inbox.";
  },
  { messages: { not_configured: "Password reset by email is not set up for this service." } },
);

ready();
