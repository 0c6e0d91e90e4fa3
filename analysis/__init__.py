"""Pure analysis over receipts: step windows, statistics, comparison, the gate, preflight rules."""
