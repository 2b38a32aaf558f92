"""pipeaudit.harness"""
