"""pipeaudit.audit"""
