"""What a user proves and how it is checked: password rules and hashing, email addresses."""
