"""pipeaudit.report"""
