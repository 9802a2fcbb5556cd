"""The second seed paper's own study: writer agents, kernel-managed injection, personalization trials.

items       a memory item (user, owner agent, type, sharing policy, content) and its formats
identity    the kernel's user-identity resolution, in the paper's priority order
kernel_memory  items on the project's memory space, written through the per-user barrier and
            read only through harness.kernel.Kernel; counts the reads that missed a write
writers     ProfileAgent, TaskAgent, ConversationExtractor: model calls that extract and write
assistant   AssistantAgent: answers with whatever the method injected; no retrieval of its own
method      what a method (conditions/<name>.py) gives the runner
record      the flat record of one trial x method, built in one function
runner      the stage: trials x methods, concurrent, crash-safe, metered
"""
