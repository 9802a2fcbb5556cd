"""The second seed paper's own study: writer agents, kernel-managed injection, personalization trials.

The kernel itself (items, identity resolution, barrier, visibility, injection, the kernel
memory) is harness/kernel/; this package holds the study around it.

writers     ProfileAgent, TaskAgent, ConversationExtractor: model calls that extract and write
assistant   AssistantAgent: answers with whatever the method injected; no retrieval of its own
method      what a method (conditions/personal/<name>.py) gives the run step
record      the flat record of one trial x method, built in one function
step        the run step the one driver (harness.run.driver) runs: plan, preflight shapes, one trial x method
forecast    what a stage will cost (dry_run=true)
"""
