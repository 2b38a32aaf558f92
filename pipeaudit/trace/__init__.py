"""pipeaudit.trace"""
