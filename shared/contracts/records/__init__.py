"""What the harness keeps and names, wherever it travels: messages and transcript entries, the todo list,
pending work, documents, the UI state, a client's context, connectors, usage rows, injections and blob
references (docs/architecture.md "Ownership")."""
