"""authgate inside an existing FastAPI application.

    pip install authgate uvicorn
    uvicorn examples.mount_fastapi:app

Your app gets /auth/register, /auth/login, … plus /health and /readiness, and any route of
its own can require a signed-in user with the `CurrentUser` dependency: it gives an
`authgate.Principal`, a frozen snapshot of the user (never the password hash).
"""

from fastapi import FastAPI

from authgate import AuthConfig, AuthGate, CurrentUser

gate = AuthGate(AuthConfig())  # reads DATABASE_URL, CACHE_URL, AUTHGATE_* from the environment
app = FastAPI(title="My product", lifespan=gate.lifespan)
gate.install(app)


@app.get("/hello")
async def hello(user: CurrentUser) -> dict[str, str]:
    """Only for signed-in, active users: 401 otherwise."""
    return {"hello": user.email}


@app.post("/notes")
async def add_note(user: CurrentUser) -> dict[str, int]:
    """An unsafe method: with cookie authentication it needs the X-CSRF-Token header too."""
    return {"owner": user.id}
