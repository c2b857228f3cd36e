"""Tokens: access JWTs and their keys (JWKS), CSRF values, opaque one-time and refresh tokens."""
