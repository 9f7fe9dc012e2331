"""jobs.recover: gather the facts, plan, write, apply in place, and show the plan to people."""
