"""Who may call: API tokens and the dashboard's sign-ins, kept in the database."""
