"""pipeaudit.timeline"""
