"""pipeaudit.cli"""
