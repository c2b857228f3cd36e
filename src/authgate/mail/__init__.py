"""Mail: rendering and SMTP delivery."""
